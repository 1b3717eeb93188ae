"""The registry: each :class:`MethodKind` and the object that implements it.

Adding a method is a module in this package, a member of :class:`MethodKind` and its line in
:data:`METHODS`; the API's parameters, the service's admission, the worker and the CLI follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.privacy.accounting import Accounting
from app.synthesis.tasks import TaskSpec

from .base import Counts, Method, MethodPlan, ParamsError, Stored, client_overrides
from .kinds import MethodKind
from .pate import PromptPate
from .promptdpsgd import PromptDpsgd
from .token_loop import TokenLoop

__all__ = [
    "METHODS",
    "Counts",
    "Method",
    "MethodKind",
    "MethodPlan",
    "ParamsError",
    "Stored",
    "configure",
    "get_method",
    "kinds_where",
    "param_fields",
]

METHODS: dict[MethodKind, Method] = {
    MethodKind.TANG: TokenLoop(MethodKind.TANG),
    MethodKind.ADADPSYN: TokenLoop(MethodKind.ADADPSYN),
    MethodKind.PROMPTPATE: PromptPate(),
    MethodKind.PROMPTDPSGD: PromptDpsgd(),
}


def get_method(kind: MethodKind | str) -> Method:
    """The method named ``kind``; ValueError if there is none."""
    return METHODS[MethodKind(kind)]


def kinds_where(test: Any) -> list[str]:
    """Names of the methods ``test(method)`` holds for, in registry order."""
    return [kind.value for kind, method in METHODS.items() if test(method)]


def configure(
    method: Method,
    task: TaskSpec,
    *,
    epsilon: float,
    delta: float | None,
    shots: int | None,
    accounting: Accounting,
    params: Mapping[str, Any] | None,
) -> Any:
    """A client's job config: a parameter of another method (or of none) is refused by name,
    saying which method takes it; the rest is :meth:`Method.configure`."""
    overrides = client_overrides(params)
    takes = method.params.model_fields
    if unknown := sorted(set(overrides) - set(takes)):
        name = unknown[0]
        owners = kinds_where(lambda other: name in other.params.model_fields)
        where = (
            f"a parameter of method {' or '.join(owners)}, not of method {method.kind.value}"
            if owners
            else f"not a parameter of method {method.kind.value}"
        )
        raise ParamsError(
            f"params.{name}: {where} (it takes {', '.join(sorted(takes))}{method.params_hint})"
        )
    return method.configure(
        task,
        epsilon=epsilon,
        delta=delta,
        shots=shots,
        accounting=accounting,
        params=overrides,
    )


@dataclass(frozen=True)
class ParamField:
    """One request parameter across methods: its type, and its description per method."""

    annotation: Any
    descriptions: dict[str, str]  # method name -> description

    def description(self) -> str:
        """One line per distinct description, each led by the methods that take it."""
        by_text: dict[str, list[str]] = {}
        for kind, text in self.descriptions.items():
            by_text.setdefault(text, []).append(kind)
        return " ".join(f"{', '.join(kinds)}: {text}" for text, kinds in by_text.items())


def param_fields() -> dict[str, ParamField]:
    """Every method's request parameters, merged by name (the API's ``params`` object).

    Two methods may share a parameter only with one type: the API has one field for it."""
    fields: dict[str, ParamField] = {}
    for kind, method in METHODS.items():
        for name, info in method.params.model_fields.items():
            field = fields.setdefault(name, ParamField(info.annotation, {}))
            if field.annotation != info.annotation:
                raise TypeError(f"parameter {name!r} has two types across methods")
            field.descriptions[kind.value] = info.description or ""
    return fields
