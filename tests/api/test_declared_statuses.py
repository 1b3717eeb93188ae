"""Every status these routes answer is declared in the OpenAPI document, checked by
schemathesis's own checks (a declared status, a body of the declared schema, no 5xx but a
declared 502) on the calls that answered an undeclared one before: ``POST /v1/advice`` with
an unknown (404) or a private (409) dataset, ``POST /v1/jobs/quote`` on a dataset without a
budget (409), and ``/complete`` when the model server refuses the call (502, its own code,
where it was a 503 "retry later")."""

from __future__ import annotations

from typing import Any

import pytest

from app.llm.base import BackendError
from tests.api.conftest import Api, auth, error_of


def _call(
    api: Api,
    path: str,
    method: str,
    body: dict[str, Any],
    key: str,
    *,
    gateway: bool = False,
    **params: Any,
):
    """The call, validated by schemathesis; ``gateway``: a declared 502 is what the test
    expects, so the check that refuses every 5xx is left out (the others still run)."""
    import schemathesis
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
    case = schema[path][method].Case(
        path_parameters=params,
        body=body,
        headers={**auth(key), "Content-Type": "application/json"},
        media_type="application/json",
    )
    return case.call_and_validate(excluded_checks=[not_a_server_error] if gateway else None)


def test_advice_refusals_are_declared(api: Api) -> None:
    unknown = _call(api, "/v1/advice", "POST", {"dataset_id": "nosuchdataset"}, api.admin)
    assert unknown.status_code == 404, unknown.text
    private = api.upload()
    refused = _call(api, "/v1/advice", "POST", {"dataset_id": private["id"]}, api.admin)
    assert refused.status_code == 409, refused.text


def test_a_quote_without_a_budget_is_a_declared_409(api: Api) -> None:
    dataset = api.upload()
    body = {"dataset_id": dataset["id"], "method": "tang", "epsilon": 1.0, "shots": 2}
    response = _call(api, "/v1/jobs/quote", "POST", body, api.admin)
    assert response.status_code == 409 and error_of(response)["code"] == "no_budget"


def test_a_refusing_model_server_is_a_declared_502(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    api.run_worker(job["id"])
    prompt_id = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise BackendError("vLLM server x /v1/completions: HTTP 400: too long", status=400)

    monkeypatch.setattr(api.backend, "next_token_probs", refuse)
    response = _call(
        api,
        "/v1/prompts/{prompt_id}/complete",
        "POST",
        {"query": "is it w5"},
        api.reader,
        gateway=True,
        prompt_id=prompt_id,
    )
    assert response.status_code == 502 and error_of(response)["code"] == "backend_rejected"
