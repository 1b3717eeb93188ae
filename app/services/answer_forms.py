"""What form an OpenAI-compatible request wants its answer in: a label of the prompt, one of
the app's own choices, or free text (``app.services.openai_compat`` answers it).

An app that asks a classification prompt a question wants one of the prompt's labels, the
answer ``/complete`` gives; a small model asked for free text writes whatever word follows
(``distance``, ``1950``: not a label at all). So a classification prompt answers with a
label unless the app asks otherwise:

* **label** (the default for a classification prompt): the decision ``/complete`` makes on
  the app's question (:func:`app.services.prompts.classify`), ``calibrated`` when the app
  asks (dpsyn's own field, as ``/complete``'s);
* **choice**: the app's own fixed answers, vLLM's ``guided_choice`` (or its newer
  ``structured_outputs: {"choice": [...]}``) or a ``response_format`` JSON schema that admits
  a fixed set of strings (an enum of strings, or an object of one required property that is
  one); vLLM decodes them itself, the embedded engine scores them;
* **text**: free text, for an extraction prompt and whenever the app sends
  ``response_format: {"type": "text"}``;
* **constrained** (vLLM only): any other structured output vLLM takes (a JSON schema, a JSON
  object, a regex or a grammar), sent to it as the app wrote it; the embedded engine cannot
  decode them and refuses them, naming the field.

Every refusal names the field (``param``) and says what is taken instead; nothing here reads
the app's messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.llm.factory import BackendKind
from app.services.errors import InvalidError
from app.synthesis.tasks import TaskKind, TaskSpec

#: The most choices one request may list, and the longest choice (characters): choices are
#: scored in one batch on the embedded engine, so a read key gets no unbounded batch.
MAX_CHOICES = 64
MAX_CHOICE_CHARS = 200
#: What a string enum's schema may say besides ``enum`` (words for people, not constraints).
_ENUM_KEYS = {"enum", "type", "title", "description"}
_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties", "title",
                "description", "$defs"}  # fmt: skip


class Form(StrEnum):
    LABEL = "label"
    CHOICE = "choice"
    TEXT = "text"
    CONSTRAINED = "constrained"


@dataclass(frozen=True)
class AskedForm:
    """The request's fields that choose the form, as the app sent them."""

    response_format: Mapping[str, Any] | None = None
    guided_choice: Sequence[str] | None = None
    structured_outputs: Mapping[str, Any] | None = None
    calibrated: bool = False


@dataclass(frozen=True)
class AnswerForm:
    """The form one answer takes. ``choices``: the answers a choice may be (as written back,
    a JSON schema's as JSON); ``constraint``: the request fields that make vLLM write the
    same answer with its own structured-output decoding (empty for a label or free text),
    from the request field ``param``."""

    form: Form
    calibrated: bool = False
    choices: tuple[str, ...] = ()
    constraint: dict[str, Any] = field(default_factory=dict)
    param: str = ""


def answer_form(asked: AskedForm, task: TaskSpec, engine: BackendKind) -> AnswerForm:
    """The form ``asked`` chooses for a prompt of ``task`` on ``engine``, or a refusal
    naming the field (:class:`InvalidError`, with ``param``)."""
    found = _constraint(asked)
    text = asked.response_format is not None and asked.response_format.get("type") == "text"
    if asked.calibrated and (found or text or task.kind != TaskKind.CLASSIFICATION):
        raise InvalidError(
            "calibrated: contextual calibration applies to the label answer of a "
            "classification prompt, without response_format, guided_choice or "
            "structured_outputs",
            code="calibration_not_applicable",
            param="calibrated",
        )
    if found is None:
        label = task.kind == TaskKind.CLASSIFICATION and not text
        return AnswerForm(Form.LABEL if label else Form.TEXT, calibrated=asked.calibrated)
    name, constraint = found
    choices = _choices(name, constraint)
    if choices is not None:
        checked = _checked(choices, name)
        return AnswerForm(Form.CHOICE, choices=checked, constraint=constraint, param=name)
    if engine is not BackendKind.VLLM:
        raise InvalidError(
            f"{name}: the embedded engine writes a fixed set of answers only: guided_choice, "
            "structured_outputs.choice, or a response_format json_schema whose schema is an "
            "enum of strings or an object of one required property that is one (other "
            "structured outputs need the vLLM engine)",
            code="unsupported_constraint",
            param=name,
        )
    return AnswerForm(Form.CONSTRAINED, constraint=constraint, param=name)


def _constraint(asked: AskedForm) -> tuple[str, dict[str, Any]] | None:
    """The one field that constrains the answer: its name, and the request fields that
    carry it to vLLM (its ``guided_choice`` became ``structured_outputs.choice``, and vLLM
    ignores the old name); None without one, a refusal for two."""
    fields: dict[str, Any] = {}
    if asked.guided_choice is not None:
        fields["guided_choice"] = {"structured_outputs": {"choice": list(asked.guided_choice)}}
    if asked.structured_outputs is not None:
        fields["structured_outputs"] = {"structured_outputs": dict(asked.structured_outputs)}
    if asked.response_format is not None and asked.response_format.get("type") != "text":
        fields["response_format"] = {"response_format": dict(asked.response_format)}
    if len(fields) > 1:
        first, second = list(fields)[:2]
        raise InvalidError(
            f"{second}: one of guided_choice, structured_outputs and response_format "
            f"constrains an answer, and {first} already does",
            code="conflicting_constraints",
            param=second,
        )
    return next(iter(fields.items()), None)


def _choices(name: str, value: dict[str, Any]) -> list[str] | None:
    """The fixed answers a constraint admits, or None when it admits another set."""
    if name == "guided_choice":
        return list(value["structured_outputs"]["choice"])
    if name == "structured_outputs":
        given = value["structured_outputs"]
        choice = given.get("choice")
        others = set(given) - {"choice", "disable_any_whitespace", "whitespace_pattern"}
        return list(choice) if isinstance(choice, list) and not others else None
    response_format = value["response_format"]
    if response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return _schema_choices(schema) if isinstance(schema, dict) else None


def _schema_choices(schema: dict[str, Any]) -> list[str] | None:
    """A JSON schema's fixed answers, as JSON: a string enum's strings, or an object of one
    required property that is a string enum (what OpenAI's structured outputs and a
    pydantic model of one ``Literal`` field send)."""
    values = _string_enum(schema, schema)
    if values is not None:
        return [json.dumps(v) for v in values]
    if schema.get("type") != "object" or not set(schema) <= _OBJECT_KEYS:
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    [(name, inner)] = properties.items()
    values = _string_enum(inner, schema)
    if values is None or schema.get("required") != [name]:
        return None
    return [json.dumps({name: v}) for v in values]


def _string_enum(schema: Any, root: dict[str, Any]) -> list[str] | None:
    """The strings of an enum-of-strings schema (through one local ``$ref``), else None."""
    if isinstance(schema, dict) and set(schema) == {"$ref"}:
        ref = str(schema["$ref"])
        defs = root.get("$defs") or {}
        schema = defs.get(ref.removeprefix("#/$defs/")) if ref.startswith("#/$defs/") else None
    if not isinstance(schema, dict) or not set(schema) <= _ENUM_KEYS:
        return None
    values = schema.get("enum")
    if schema.get("type", "string") != "string" or not isinstance(values, list):
        return None
    return values if values and all(isinstance(v, str) for v in values) else None


def _checked(choices: list[str], name: str) -> tuple[str, ...]:
    """``choices`` within the bounds: non-empty strings, distinct, at most
    :data:`MAX_CHOICES` of at most :data:`MAX_CHOICE_CHARS` characters."""
    problem = None
    if not choices or len(choices) > MAX_CHOICES:
        problem = f"between 1 and {MAX_CHOICES} choices, got {len(choices)}"
    elif any(not isinstance(c, str) or not c or len(c) > MAX_CHOICE_CHARS for c in choices):
        problem = f"each choice a string of 1 to {MAX_CHOICE_CHARS} characters"
    elif len(set(choices)) != len(choices):
        problem = "the choices must be distinct"
    if problem is not None:
        raise InvalidError(f"{name}: {problem}", code="invalid_choices", param=name)
    return tuple(choices)
