"""The command-line options of the registered methods, made from their declarations.

No method's option is written by hand: :class:`RegistryCommand` gives a command one option
per flag of the registered methods (``app.methods``: each parameter's type, default, bounds
and help as its method declares it) and a ``--method`` that chooses among their names, read
when typer builds the command, so a method registered before that (a test's own) is offered.
A separate module from :mod:`app.cli.options` because it loads the registry, and the thin
HTTP client (:mod:`app.cli.client`) must not.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

import typer
from typer.models import OptionInfo

from app.methods import registry
from app.methods.base import Method
from app.methods.params import Param

METHOD_PANEL = "Method parameters"  # the help section that lists them
NO_SHOTS = "no shots (it has no demonstrations)"  # what a method without shots_param takes
# Subscripted at run time with the types the registry holds now (not type expressions).
_ANNOTATED: Any = Annotated
_LITERAL: Any = Literal


@dataclass(frozen=True)
class MethodOption:
    """One command-line flag across the registered methods: what it sets for each method
    that takes it (``params``: the declaration behind it), and whether that is the job's
    shots (the registry keeps one meaning per flag)."""

    flag: str
    annotation: Any
    shots: bool
    params: dict[str, Param] = field(default_factory=dict)  # method name -> declaration

    @property
    def argument(self) -> str:
        return next(iter(self.params.values())).argument

    def takers(self) -> str:
        """The methods that take the flag, as the refusals name them (tang/adadpsyn)."""
        return "/".join(self.params)

    def help(self) -> str:
        """Each taker's help with its bounds and default, takers with the same text sharing
        it."""
        grouped: dict[str, list[str]] = {}
        for name, param in self.params.items():
            text = param.help.strip()
            if bounds := param.bounds_text():
                text = f"{text} Range {bounds}."
            if default := param.default_text():
                text = f"{text} Default {default}."
            grouped.setdefault(text, []).append(name)
        return " ".join(f"{'/'.join(names)}: {text}" for text, names in grouped.items())

    def declaration(self) -> str:
        """The option's names: an on/off parameter is a flag pair (``--x/--no-x``), so a
        script can say either, and neither takes a value."""
        if self.annotation is bool:
            return f"{self.flag}/--no-{self.flag.removeprefix('--')}"
        return self.flag

    def parameter(self) -> inspect.Parameter:
        """The option as a keyword parameter of the command (None: not given)."""
        option = typer.Option(
            self.declaration(), help=self.help(), show_default=False, rich_help_panel=METHOD_PANEL
        )
        annotation = _ANNOTATED[self.annotation | None, option]
        return inspect.Parameter(
            self.argument, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
        )


def method_options() -> list[MethodOption]:
    """One option per flag of the registered methods (each one's shots, then its
    parameters), in registry order."""
    options: dict[str, MethodOption] = {}
    for name, method in registry.METHODS.items():
        shots = [method.shots_param] if method.shots_param is not None else []
        for param in [*shots, *method.parameters]:
            is_shots = param is method.shots_param
            option = options.setdefault(
                param.flag, MethodOption(param.flag, param.annotation, is_shots)
            )
            option.params[name] = param
    return list(options.values())


def given_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The method options given on the command line, by flag, from the command's
    ``**method_options`` (an option left out is None)."""
    return {
        option.flag: values[option.argument]
        for option in method_options()
        if values.get(option.argument) is not None
    }


def params_by_name(given: Mapping[str, Any]) -> dict[str, Any]:
    """The method options ``given`` (by flag) as parameters by name, for a command that runs
    several methods at once (``dpsyn eval``): each method that takes a name gets its value."""
    options = {option.flag: option for option in method_options()}
    return {
        param.name: value
        for flag, value in given.items()
        for param in options[flag].params.values()
        if not options[flag].shots
    }


def refuse_other_options(method: Method, given: Mapping[str, Any]) -> None:
    """A ValueError for the method options ``given`` (by flag) that ``method`` does not
    take, naming the methods that do: a command that runs or prices one method would
    otherwise ignore them silently (``--teachers 5`` with ``--method tang``)."""
    name = method.name
    unused = [o for o in method_options() if o.flag in given and name not in o.params]
    for option in unused:
        if option.shots:
            shots = method.shots_param.flag if method.shots_param is not None else NO_SHOTS
            raise ValueError(f"{option.flag} is for {option.takers()}; {name} takes {shots}")
    if unused:
        flags = ", ".join(o.flag for o in unused)
        raise ValueError(f"{flags} are for {unused[0].takers()}, not {name}")


def method_inputs(method: Method, given: Mapping[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """The job's shots (None: the method's default) and the method's ``params`` by name, from
    the method options ``given`` by flag (:func:`refuse_other_options` has refused those of
    other methods): what ``Method.configure`` and the service's planning take."""
    shots = given.get(method.shots_param.flag) if method.shots_param is not None else None
    params = {p.name: given[p.flag] for p in method.parameters if p.flag in given}
    return shots, params


def _flags_of(parameter: inspect.Parameter) -> set[str]:
    """The flags a command's own (Annotated) option declares."""
    flags: set[str] = set()
    for info in get_args(parameter.annotation)[1:]:
        if isinstance(info, OptionInfo):
            declared = [info.default, *(info.param_decls or ())]
            flags |= {d for d in declared if isinstance(d, str) and d.startswith("-")}
    return flags


def _with_method_choices(parameter: inspect.Parameter) -> inspect.Parameter:
    """``method`` as a choice of the registered names (typer reads a Literal as choices), and
    an option whose help says ``{methods}`` with the registered names in its place."""
    args = get_args(parameter.annotation)
    if parameter.name == "method":
        choices = _LITERAL[tuple(registry.method_names())]
        return parameter.replace(annotation=_ANNOTATED[(choices, *args[1:])])
    infos = [_named_methods(info) for info in args[1:]]
    if infos == list(args[1:]):
        return parameter
    return parameter.replace(annotation=_ANNOTATED[(args[0], *infos)])


def _named_methods(info: Any) -> Any:
    """``info`` with ``{methods}`` in its help replaced by the registered names (a copy)."""
    if not isinstance(info, OptionInfo) or "{methods}" not in (info.help or ""):
        return info
    named = copy.copy(info)
    named.help = (info.help or "").replace("{methods}", ", ".join(registry.method_names()))
    return named


class RegistryCommand:
    """A typer command over ``base`` whose options are ``base``'s own plus one per flag of
    the registered methods (:func:`method_options`; none with ``options=False``), with
    ``--method`` choosing among the registered names and ``{methods}`` in an option's help
    naming them. Typer reads the signature each time it builds the command (every run of
    ``dpsyn``, after :func:`app.cli.load_method_plugins`), so a method registered before
    that is offered with its parameters. ``base`` receives the method options in
    ``**method_options``, by argument name."""

    def __init__(
        self, base: Callable[..., None], *, options: bool = True, shots: bool = True
    ) -> None:
        self.base = base
        self.options = options
        self.shots = shots  # False: no method's shots flag (the command has its own --shots)
        self.__name__ = base.__name__
        self.__doc__ = base.__doc__
        self.__annotations__: dict[str, Any] = {}  # typer asks for type hints too

    @property
    def __signature__(self) -> inspect.Signature:
        own = inspect.signature(self.base, eval_str=True)
        fixed = [
            _with_method_choices(p) for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD
        ]
        if not self.options:
            return own.replace(parameters=fixed)
        taken = {flag for p in fixed for flag in _flags_of(p)} | {p.name for p in fixed}
        options = [o for o in method_options() if self.shots or not o.shots]
        clashes = [o.flag for o in options if o.flag in taken or o.argument in taken]
        if clashes:
            raise ValueError(
                f"{', '.join(clashes)}: a method's flag is one of the command's own options; "
                "declare another flag for that parameter (app.methods.params.declare)"
            )
        return own.replace(parameters=[*fixed, *(o.parameter() for o in options)])

    def __call__(self, **kwargs: Any) -> None:
        self.base(**kwargs)
