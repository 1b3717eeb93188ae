"""The answer's form an OpenAI-compatible request asks for (app.services.answer_forms): which
JSON schemas the embedded engine can answer as a fixed set of strings (those the openai
package and pydantic send for a one-field model of a Literal or an Enum), what goes to vLLM
(its current field names), and the refusals, each naming its field."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Literal

import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel

from app.llm.factory import BackendKind
from app.services.answer_forms import AnswerForm, AskedForm, Form, answer_form
from app.services.errors import InvalidError
from app.synthesis.tasks import BUILTIN_TASKS

TREC, MITG = BUILTIN_TASKS["trec"], BUILTIN_TASKS["mitg"]
LOCAL, VLLM = BackendKind.TRANSFORMERS, BackendKind.VLLM


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class ByLiteral(BaseModel):
    colour: Literal["red", "blue"]


class ByEnum(BaseModel):
    colour: Colour


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}


def form_of(engine: BackendKind = LOCAL, task=TREC, **asked) -> AnswerForm:
    return answer_form(AskedForm(**asked), task, engine)


def test_defaults_a_label_for_classification_and_text_for_extraction() -> None:
    assert form_of().form is Form.LABEL
    assert form_of(calibrated=True) == AnswerForm(Form.LABEL, calibrated=True)
    assert form_of(response_format={"type": "text"}).form is Form.TEXT
    assert form_of(task=MITG).form is Form.TEXT
    assert form_of(VLLM).form is Form.LABEL  # the same decision on either engine


@pytest.mark.parametrize("model", [ByLiteral, ByEnum])
def test_a_pydantic_model_of_one_fixed_field_is_a_choice(model: type[BaseModel]) -> None:
    for schema in (model.model_json_schema(), to_strict_json_schema(model)):
        form = form_of(response_format=schema_format(schema))
        assert form.form is Form.CHOICE and form.param == "response_format"
        assert [json.loads(c) for c in form.choices] == [{"colour": "red"}, {"colour": "blue"}]


def test_a_string_enum_is_a_choice_of_json_strings() -> None:
    for schema in ({"enum": ["a", "b"]}, {"type": "string", "enum": ["a", "b"], "title": "x"}):
        assert form_of(response_format=schema_format(schema)).choices == ('"a"', '"b"')


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "enum": [1, 2]},
        {"enum": ["a", 1]},
        {"type": "string"},
        {"type": "string", "enum": ["a"], "pattern": "a"},
        {"type": "object", "properties": {"c": {"enum": ["a"]}}},  # {} would be valid too
        {
            "type": "object",
            "properties": {"c": {"enum": ["a"]}, "d": {"enum": ["b"]}},
            "required": ["c", "d"],
        },
        {"type": "object", "properties": {"c": {"$ref": "#/$defs/missing"}}, "required": ["c"]},
    ],
)
def test_other_schemas_are_vllms_and_refused_on_the_embedded_engine(schema: dict) -> None:
    response_format = schema_format(schema)
    with pytest.raises(InvalidError) as refused:
        form_of(response_format=response_format)
    assert refused.value.extra["param"] == "response_format"
    assert refused.value.error_code == "unsupported_constraint"
    form = form_of(VLLM, response_format=response_format)
    assert form.form is Form.CONSTRAINED
    assert form.constraint == {"response_format": response_format}  # as the app wrote it


def test_guided_choice_reaches_vllm_under_its_current_name() -> None:
    form = form_of(VLLM, guided_choice=["a", "b"])
    assert form.form is Form.CHOICE and form.choices == ("a", "b")
    # vLLM (0.32) ignores guided_choice, with a warning: the constraint is structured_outputs
    assert form.constraint == {"structured_outputs": {"choice": ["a", "b"]}}
    given = {"choice": ["a"], "disable_any_whitespace": True}
    assert form_of(VLLM, structured_outputs=given).constraint == {"structured_outputs": given}
    assert form_of(structured_outputs=given).choices == ("a",)


def test_json_object_and_regex_are_vllms_only() -> None:
    for asked in ({"response_format": {"type": "json_object"}},
                  {"structured_outputs": {"regex": "[a-z]+"}}):  # fmt: skip
        assert form_of(VLLM, **asked).form is Form.CONSTRAINED
        with pytest.raises(InvalidError) as refused:
            form_of(**asked)
        assert refused.value.extra["param"] == next(iter(asked))
