"""The registry: every method by name, and the rules on parameters that all methods share.

The four built-in methods register here at import. A method defined anywhere else (a plug-in
module, a test) registers with :func:`register` and leaves with :func:`unregister`, or for
the span of a ``with`` block with :func:`registered`; the API's ``method`` and ``params``, the
service's admission, the worker, the CLI options, the dashboard's form and the docs table all
ask the registry when they need it (not once at import), so a registered method is offered
everywhere with nothing else to edit. A method name is a plain string: :class:`MethodKind`
only spells the built-in four. A process runs only the methods registered in it: a worker
process must register the same plug-ins as the API that admits their jobs.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.privacy.accounting import Accounting
from app.synthesis.tasks import TaskSpec

from .base import (
    Counts,
    CountsMode,
    Method,
    MethodPlan,
    ParamsError,
    Stored,
    client_overrides,
    counts_refusal,
)
from .kinds import MethodKind
from .params import FLAG, Param
from .pate import PromptPate
from .promptdpsgd import PromptDpsgd
from .token_loop import TokenLoop

__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "Counts",
    "CountsMode",
    "Method",
    "MethodKind",
    "MethodPlan",
    "ParamsError",
    "Stored",
    "UnknownMethodError",
    "configure",
    "counts_refusal",
    "find_method",
    "get_method",
    "kinds_where",
    "method_names",
    "param_fields",
    "register",
    "registered",
    "unknown_method",
    "unregister",
    "validate_params",
]

# name -> method, in registration order. Change it through register/unregister only, which
# check what every method must agree on.
METHODS: dict[str, Method] = {}
DEFAULT_METHOD = MethodKind.ADADPSYN.value  # what a job or a run uses when none is named
NAME = re.compile(r"[a-z][a-z0-9_]*")
NAME_MAX_CHARS = 32  # the jobs.method and prompt_sets.method columns


class UnknownMethodError(ValueError):
    """No method is registered under that name; the message lists those that are."""


def unknown_method() -> str:
    """What a request naming no registered method is told (it does not echo the name)."""
    return f"not a registered method; one of {', '.join(METHODS)}"


def method_names() -> list[str]:
    """The registered methods' names, in registration order."""
    return list(METHODS)


def find_method(name: str) -> Method | None:
    """The method registered as ``name``, or None."""
    return METHODS.get(str(name))


def get_method(name: str) -> Method:
    """The method registered as ``name``; :class:`UnknownMethodError` if there is none."""
    method = find_method(name)
    if method is None:
        raise UnknownMethodError(f"method {str(name)[:64]!r}: {unknown_method()}")
    return method


def kinds_where(test: Any) -> list[str]:
    """Names of the methods ``test(method)`` holds for, in registry order."""
    return [name for name, method in METHODS.items() if test(method)]


def register(method: Method) -> Method:
    """Add ``method`` under its name. ValueError, changing nothing, if the name is taken or
    not a lowercase identifier of at most 32 characters, or if its parameters disagree with
    the registered methods' (one parameter name has one type in the API's ``params``; one
    flag means one parameter, or the job's shots, on the command line)."""
    name = getattr(method, "name", None)
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > NAME_MAX_CHARS:
        raise ValueError(
            f"a method's name is a lowercase identifier of at most {NAME_MAX_CHARS} "
            f"characters, got {name!r}"
        )
    if name in METHODS:
        raise ValueError(f"a method named {name!r} is already registered")
    _check_parameters(method)
    METHODS[name] = method
    return method


def unregister(name: str) -> Method:
    """Remove the method registered as ``name`` and return it."""
    get_method(name)
    return METHODS.pop(name)


@contextmanager
def registered(method: Method) -> Iterator[Method]:
    """``method`` registered for the span of the block (tests, studies)."""
    register(method)
    try:
        yield method
    finally:
        unregister(method.name)


def import_method_modules(modules: Iterable[str]) -> None:
    """Import each of ``modules`` (``DPSYN_METHOD_MODULES``), which register their methods
    as they load; one already imported is not run again. A module that is missing or fails
    is a ValueError naming it and the error's type (not its message), at the process's start
    rather than at the first job of its method. That includes a module that raises
    ``SystemExit`` (``sys.exit(0)``) or ``KeyboardInterrupt`` as it loads, which would
    otherwise end the process as if it had been asked to stop (``sys.exit(0)``: status 0,
    no message) instead of naming the plug-in."""
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException as err:  # SystemExit, KeyboardInterrupt: the plug-in failed too
            raise ValueError(
                f"DPSYN_METHOD_MODULES: cannot import {module!r} ({type(err).__name__})"
            ) from err


def _flags(method: Method) -> dict[str, str]:
    """Each flag of ``method`` and what it sets: a parameter's name, or "" (the shots)."""
    flags = {param.flag: param.name for param in method.parameters}
    if method.shots_param is not None:
        flags[method.shots_param.flag] = ""
    return flags


def _check_parameters(method: Method) -> None:
    """ValueError if ``method``'s parameters clash with a registered method's."""
    names = [param.name for param in method.parameters]
    if len(set(names)) != len(names) or len(set(_flags(method))) != len(names) + bool(
        method.shots_param
    ):
        raise ValueError(f"method {method.name}: a parameter or flag is declared twice")
    for flag in _flags(method):
        if not FLAG.fullmatch(flag):
            raise ValueError(f"method {method.name}: {flag!r} is not a command-line flag")
    for other in METHODS.values():
        _check_pair(method, other)


def _check_pair(method: Method, other: Method) -> None:
    theirs = {param.name: param for param in other.parameters}
    for param in method.parameters:
        if param.name in theirs and theirs[param.name].annotation != param.annotation:
            raise ValueError(
                f"method {method.name}: parameter {param.name!r} has another type in method "
                f"{other.name} (the API's params has one field per name)"
            )
    their_flags = _flags(other)
    for flag, meaning in _flags(method).items():
        if flag in their_flags and their_flags[flag] != meaning:
            what = f"parameter {their_flags[flag]}" if their_flags[flag] else "the job's shots"
            raise ValueError(
                f"method {method.name}: {flag} already sets {what} of method {other.name}"
            )


def _refusal(method: Method, name: str) -> str:
    """Why ``method`` refuses the parameter ``name``: whose it is, and what it takes."""
    owners = kinds_where(lambda other: name in other.params.model_fields)
    where = (
        f"a parameter of method {' or '.join(owners)}, not of method {method.name}"
        if owners
        else f"not a parameter of method {method.name}"
    )
    takes = ", ".join(sorted(method.params.model_fields)) or "none"
    return f"{where} (it takes {takes}{method.params_hint})"


def by_declared_name(method: Method, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with a parameter given by its command-line spelling renamed to its name:
    PromptPATE's per-teacher ``shots`` is ``--teacher-shots`` in ``dpsyn synthesize``, so
    ``dpsyn jobs submit --teacher-shots 2`` (the thin client sends its flags as they are
    spelled, ``teacher_shots``) means the same. Both spellings at once is a ValueError."""
    spelled = {p.argument: p.name for p in method.parameters if p.argument != p.name}
    both = [name for name in spelled if name in params and spelled[name] in params]
    if both:
        raise ValueError(
            f"params: {both[0]} and {spelled[both[0]]} are the same parameter; give one"
        )
    return {spelled.get(name, name): value for name, value in params.items()}


def validate_params(method: Method, params: Mapping[str, Any]) -> dict[str, Any]:
    """A request's ``params`` for ``method``: its own validated by its parameter model
    (strict numbers, the config's bounds; unset ones, None, left out), and a ValidationError
    locating each problem at the parameter's name, also for a name no registered method
    takes. A parameter of another method is passed on as it is: :func:`configure` refuses
    it, naming who takes it, after the request's other checks (the service's order)."""
    params = by_declared_name(method, params)
    takes = method.params.model_fields
    known = {name for other in METHODS.values() for name in other.params.model_fields}
    unknown = [name for name in params if name not in known]
    if unknown:
        errors = [
            InitErrorDetails(
                type=PydanticCustomError("not_a_parameter", _refusal(method, str(name))),
                loc=(str(name)[:64],),
                input=None,
            )
            for name in unknown
        ]
        raise ValidationError.from_exception_data(method.params.__name__, errors)
    own = {name: value for name, value in params.items() if name in takes}
    others = {name: value for name, value in params.items() if name not in takes}
    return {**method.params.model_validate(own).model_dump(exclude_none=True), **others}


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
    if unknown := sorted(set(overrides) - set(method.params.model_fields)):
        raise ParamsError(f"params.{unknown[0]}: {_refusal(method, unknown[0])}")
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
    """One request parameter across methods: its type, and its declaration per method."""

    annotation: Any
    descriptions: dict[str, str]  # method name -> description
    params: dict[str, Param]  # method name -> its declaration

    def description(self) -> str:
        """One line per distinct description, each led by the methods that take it."""
        by_text: dict[str, list[str]] = {}
        for name, text in self.descriptions.items():
            by_text.setdefault(text, []).append(name)
        return " ".join(f"{', '.join(names)}: {text}" for text, names in by_text.items())


def param_fields() -> dict[str, ParamField]:
    """Every registered method's request parameters, merged by name (the API's ``params``
    object; :func:`register` keeps one type per name)."""
    fields: dict[str, ParamField] = {}
    for name, method in METHODS.items():
        for param in method.parameters:
            field = fields.setdefault(param.name, ParamField(param.annotation, {}, {}))
            field.descriptions[name] = param.description()
            field.params[name] = param
    return fields


for _builtin in (
    TokenLoop(MethodKind.TANG.value),
    TokenLoop(MethodKind.ADADPSYN.value),
    PromptPate(),
    PromptDpsgd(),
):
    register(_builtin)
