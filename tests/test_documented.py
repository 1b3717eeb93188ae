"""Fields documented by the docstring under them (app.documented): pydantic reads the
docstring as the description, on one line, for every model that documents its fields so;
the API's schema and the methods' generated options read those descriptions."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from app.api.openai_schemas import ChatCompletionRequest
from app.api.schemas import JobCreate
from app.documented import Documented
from app.pate.config import PateConfig
from app.privacy.params import AdaDPSynParams
from app.promptdpsgd.config import PromptDpsgdConfig
from app.settings import Settings


class _Example(Documented):
    wrapped: int = Field(3, ge=1)
    """The first line of a docstring
    and its second line."""
    short: str = "a"
    """One line."""
    explicit: int = Field(1, description="given in Field")
    undocumented: int = 0


def test_a_docstring_is_the_description_on_one_line():
    fields = _Example.model_fields
    assert fields["wrapped"].description == "The first line of a docstring and its second line."
    assert fields["short"].description == "One line."
    assert fields["explicit"].description == "given in Field"
    assert fields["undocumented"].description is None
    schema = _Example.model_json_schema()["properties"]
    assert schema["wrapped"]["description"] == fields["wrapped"].description
    assert schema["wrapped"]["minimum"] == 1  # the constraints stay where they were


def test_a_plain_model_ignores_docstrings():
    """The negative control: without Documented, pydantic reads no docstring."""

    class Plain(BaseModel):
        x: int = 0
        """Not read."""

    assert Plain.model_fields["x"].description is None


@pytest.mark.parametrize(
    ("model", "field", "words"),
    [
        (PateConfig, "teachers", "Ensemble size E"),
        (AdaDPSynParams, "coverage_margin", "a coverage check passes"),
        (Settings, "count_release_share", "label counts costs, charged once"),
        (JobCreate, "validation_dataset_id", "Post-processing of the DP output"),
    ],
)
def test_the_service_models_read_their_docstrings(model, field, words):
    description = model.model_fields[field].description
    assert description is not None and words in description
    assert "\n" not in description


def _documented_models() -> list[type[BaseModel]]:
    """Every model of the service that documents its fields by docstrings."""
    found, stack = [], [Documented]
    while stack:
        for model in stack.pop().__subclasses__():
            if model.__module__.startswith("app."):
                found.append(model)
            stack.append(model)
    return [*found, Settings]


def test_no_description_spans_lines():
    """A wrapped docstring must not reach the OpenAPI document, a generated option's help
    or a form as several lines."""
    models = _documented_models()
    assert {ChatCompletionRequest, PromptDpsgdConfig, PateConfig, JobCreate} <= set(models)
    assert len(models) > 40  # the API's schemas, the method configs, the privacy parameters
    spanning = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if field.description and "\n" in field.description
    ]
    assert not spanning
    assert JobCreate.model_json_schema()["properties"]["epsilon"]["description"] == (
        "Target epsilon of this job; noise is calibrated to it."
    )
