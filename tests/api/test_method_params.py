"""The ``params`` of ``POST /v1/jobs`` come from the methods' own models (``app.methods``):
documented in the OpenAPI document with the methods that take each, validated as strictly
as before, and refused for the wrong method by the one rule of the registry."""

from __future__ import annotations

from app.methods.registry import METHODS
from tests.api.conftest import FAST_PARAMS, Api, error_of


def _job_params_schema(api: Api) -> dict:
    schema = api.client.get("/openapi.json").json()
    return schema["components"]["schemas"]["JobParams"]


def test_openapi_documents_every_parameter_of_every_method(api: Api) -> None:
    properties = _job_params_schema(api)["properties"]
    for kind, method in METHODS.items():
        for name, field in method.params.model_fields.items():
            assert name in properties, name
            described = properties[name].get("description", "")
            assert described.startswith(kind) or f", {kind}:" in described, name
            assert (field.description or "").split(" (")[0].rstrip(".") in described, name
    assert "seed" not in properties  # never from a client


def test_params_stay_strict_and_names_are_strings(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], epsilon=10.0).status_code == 200
    numbers_as_text = api.submit(dataset["id"], params={**FAST_PARAMS, "M": "2"})
    assert numbers_as_text.status_code == 422
    assert "params.M" in error_of(numbers_as_text)["message"]
    variant = api.submit(  # the paper variant's fixed mechanisms cost 3.9 at delta 1e-6
        dataset["id"], 6.0, method="adadpsyn", params={**FAST_PARAMS, "variant": "paper"}
    )
    assert variant.status_code == 201, variant.text
    wrong = api.submit(dataset["id"], params={**FAST_PARAMS, "teachers": 4})
    assert wrong.status_code == 422
    assert error_of(wrong)["message"].startswith(
        "params.teachers: a parameter of method promptpate, not of method tang"
    )
