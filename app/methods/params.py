"""A method's request parameters, each declared once, from the method's own config class.

A method names the fields of its config (``SynthesisConfig``, ``PateConfig``, ...) that a
client may set. Type, default and bounds are read from that field, so no other place restates
them and none can drift; the method adds a help sentence where the config's description is
missing or depends on the job, and a command-line flag where the field's name would be
ambiguous (PromptPATE's per-teacher ``shots`` is ``--teacher-shots``, because ``--shots`` is
the job's). Everything else is generated from these declarations: the pydantic model that
validates a request's ``params`` (:func:`params_model`), the API's schema, the ``dpsyn
synthesize`` options, the dashboard's form and the docs table (:mod:`app.methods.docs`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, Strict, create_model

FLAG = re.compile(r"--[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)*")
# How each bound reads in an interval: [1, 200], (0, inf).
_LOWER = {annotated_types.Ge: ("[", "ge"), annotated_types.Gt: ("(", "gt")}
_UPPER = {annotated_types.Le: ("]", "le"), annotated_types.Lt: (")", "lt")}


@dataclass(frozen=True)
class Param:
    """One parameter a client may set: the config field ``name`` (also its key in a job's
    ``params``), of type ``annotation``, with the config's ``default`` (None: none fixed; the
    help says what decides it, e.g. the task), a ``help`` sentence, the CLI ``flag`` and
    the config's own constraints (``metadata``: bounds, finiteness), which validate it."""

    name: str
    annotation: Any
    default: Any
    help: str
    flag: str
    metadata: tuple[Any, ...] = ()

    @property
    def argument(self) -> str:
        """The flag as a Python name (``--teacher-shots``: ``teacher_shots``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def choices(self) -> tuple[str, ...]:
        """The allowed values of an enumerated parameter; () for any other."""
        if _is_enum(self.annotation):
            return tuple(str(member.value) for member in self.annotation)
        return ()

    def type_name(self) -> str:
        """The type as the docs and the help show it: int, float, str, or its choices."""
        if self.choices:
            return " | ".join(self.choices)
        return getattr(self.annotation, "__name__", str(self.annotation))

    def default_text(self) -> str:
        """The default as text; "" when none is fixed."""
        return "" if self.default is None else str(self.default)

    def bounds_text(self) -> str:
        """The config's bounds as an interval, e.g. ``[1, 200]`` or ``(0, 1)``; "" if none."""
        lower = upper = None
        for item in self.metadata:
            for kind, (bracket, attribute) in _LOWER.items():
                if isinstance(item, kind):
                    lower = f"{bracket}{getattr(item, attribute)}"
            for kind, (bracket, attribute) in _UPPER.items():
                if isinstance(item, kind):
                    upper = f"{getattr(item, attribute)}{bracket}"
        if lower is None and upper is None:
            return ""
        return f"{lower or '(-inf'}, {upper or 'inf)'}"

    def description(self) -> str:
        """The help with the default, as the API's schema describes the parameter."""
        text = self.help.strip()
        if self.default is not None:
            text = f"{text} Default {self.default}.".strip()
        return text

    def validator(self) -> Any:
        """The type a request's value is validated against: the config's constraints, and
        strict for numbers (JSON true is not 1, nor "2" a 2); a name (an enum) may come as
        its string."""
        extra = (*self.metadata, *(() if _is_enum(self.annotation) else (Strict(),)))
        return Annotated[(self.annotation, *extra)] if extra else self.annotation


def declare(
    config: type[BaseModel],
    names: Iterable[str],
    *,
    help: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> tuple[Param, ...]:
    """The :class:`Param` of each of ``config``'s fields ``names``: type, default and
    constraints from the field; help from ``help`` (else the field's description) and the
    flag from ``flags`` (else ``--name``, with ``-`` for ``_``)."""
    help, flags = help or {}, flags or {}
    return tuple(_param(config, name, help.get(name), flags.get(name)) for name in names)


def _param(config: type[BaseModel], name: str, help: str | None, flag: str | None) -> Param:
    info = config.model_fields[name]
    default = None if info.is_required() else info.default
    if isinstance(default, Enum):
        default = default.value
    return Param(
        name=name,
        annotation=_without_none(info.annotation),
        default=default,
        help=help if help is not None else info.description or "",
        flag=flag or f"--{name.replace('_', '-')}",
        metadata=tuple(info.metadata),
    )


def params_model(name: str, params: Sequence[Param]) -> type[BaseModel]:
    """The model of a request's ``params`` for a method taking ``params``: each optional
    (None: the config's default), typed and constrained as its config field, nothing else
    accepted."""
    fields: dict[str, Any] = {
        param.name: (param.validator() | None, Field(None, description=param.description()))
        for param in params
    }
    model: type[BaseModel] = create_model(
        name, __config__=ConfigDict(extra="forbid", frozen=True), **fields
    )
    return model


def json_schema(param: Param) -> dict[str, Any]:
    """The JSON schema of ``param``'s value (the OpenAPI document's; null: the default)."""
    schema: dict[str, Any] = dict(_JSON_TYPES.get(param.annotation, {}))
    if param.choices:
        schema = {"type": "string", "enum": list(param.choices)}
    for item in param.metadata:
        for kind, keyword in _JSON_BOUNDS.items():
            if isinstance(item, kind):
                schema[keyword] = getattr(item, kind.__name__.lower())
    return {"anyOf": [schema, {"type": "null"}]}


_JSON_TYPES: dict[Any, dict[str, str]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
}
_JSON_BOUNDS = {
    annotated_types.Ge: "minimum",
    annotated_types.Gt: "exclusiveMinimum",
    annotated_types.Le: "maximum",
    annotated_types.Lt: "exclusiveMaximum",
}


def _is_enum(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation
