"""Options declared once for the commands that share them, so their names and help never
drift apart: the custom task's and the table columns' (the groups :class:`ColumnOptions` and
:class:`CustomTaskOptions`, for ``dpsyn synthesize``, ``dpsyn advise`` and ``dpsyn datasets
upload``), and the few the local commands share word for word. An option group is a frozen
dataclass of ``Annotated`` options; a command takes it as one parameter and :func:`with_groups`
(or a :class:`GroupedTyper`, which applies it to each of its commands) lays its options out
in that parameter's place. The client commands' ``--url``, ``--key`` and ``--json`` are such
groups too (:class:`app.cli.http_client.Server`, :class:`~app.cli.http_client.Reply`). (The
method options are made from the registry: :mod:`app.cli.method_options`.)"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer
from typer.models import CommandFunctionType

from app.privacy.accounting import Accounting

R = TypeVar("R")

TEXT_COL = typer.Option(
    "--text-col",
    "--text-column",
    help="Text column: a header name, or a number (1 = first) for a CSV without a header "
    "(2+3 joins two columns, e.g. a title and a body).",
)
LABEL_COL = typer.Option(
    "--label-col",
    "--label-column",
    help="Label column: a header name, or a number for a CSV without a header.",
)
LABEL_MAP = typer.Option(
    "--label-map",
    help="Raw label values to label names, e.g. 1=Company,2=Artist; alone it also gives a "
    "custom task's labels, in this order.",
)
LABELS = typer.Option(
    "--labels", help="Custom task: its labels, a,b,... (the answer words, as written)."
)
ANSWER_WORDS = typer.Option(
    "--answer-words",
    help="Custom task: the word the model writes for a label, LABEL=WORD,... "
    "(default: the label as given).",
)
INSTRUCTION = typer.Option(
    "--instruction", help="Custom task: generation instruction (the first line of a prompt)."
)
ICL_INSTRUCTION = typer.Option(
    "--icl-instruction",
    help="Custom task: classification instruction (default: one that lists the labels).",
)
TEXT_FIELD = typer.Option("--text-field", help="Custom task: name of the text line (Text).")
LABEL_FIELD = typer.Option("--label-field", help="Custom task: name of the label line (Label).")


# Options the local commands (synthesize, privacy quote, privacy epsilon) share word for word.
RegisteredMethodOpt = Annotated[str, typer.Option("--method", help="A registered method.")]
PaperAccountingOpt = Annotated[
    Accounting,
    typer.Option("--accounting", help="tight (default) or paper (needs --public-counts)."),
]
PrintJsonOpt = Annotated[
    bool, typer.Option("--json/--no-json", help="Print machine-readable JSON.")
]


@dataclass(frozen=True)
class ColumnOptions:
    """How a table's columns are read: ``--text-col``, ``--label-col``, ``--label-map``."""

    text_col: Annotated[str | None, TEXT_COL] = None
    label_col: Annotated[str | None, LABEL_COL] = None
    label_map: Annotated[str | None, LABEL_MAP] = None


@dataclass(frozen=True)
class CustomTaskOptions:
    """A custom task's words: ``--labels``, ``--answer-words``, the two instructions and the
    names of the text and label lines."""

    labels: Annotated[str | None, LABELS] = None
    answer_words: Annotated[str | None, ANSWER_WORDS] = None
    instruction: Annotated[str | None, INSTRUCTION] = None
    icl_instruction: Annotated[str | None, ICL_INSTRUCTION] = None
    text_field: Annotated[str | None, TEXT_FIELD] = None
    label_field: Annotated[str | None, LABEL_FIELD] = None

    def given(self) -> dict[str, str | None]:
        """The options by name (None: not given)."""
        return dataclasses.asdict(self)


KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


def with_groups(command: Callable[..., R]) -> Callable[..., R]:
    """A command decorator: each parameter of the command annotated with a dataclass (an
    option group: :class:`ColumnOptions`, :class:`app.cli.http_client.Reply`, ...) stands
    for that dataclass's fields, which become the command's options in its place (their
    ``Annotated`` typer options and defaults); the command receives the group built from
    them. So a group of options is declared once, and every command that reads it gets the
    same names and help. Typer reads the returned function's ``__signature__`` (as
    :class:`app.cli.method_options.RegistryCommand` does) and passes every option by name,
    so all of them are keyword-only there."""
    own = inspect.signature(command, eval_str=True)
    groups = {p.name: p.annotation for p in own.parameters.values() if _is_group(p.annotation)}
    params: list[inspect.Parameter] = []
    for param in own.parameters.values():
        if param.name in groups:
            params += [
                inspect.Parameter(f.name, KEYWORD_ONLY, default=_default(f), annotation=t)
                for f, t in _fields(groups[param.name])
            ]
        elif param.kind is param.VAR_KEYWORD:
            params.append(param)
        else:
            params.append(param.replace(kind=KEYWORD_ONLY))

    @functools.wraps(command)
    def grouped(*args: Any, **kwargs: Any) -> R:
        for name, group in groups.items():
            names = [f.name for f in dataclasses.fields(group)]
            kwargs[name] = group(**{n: kwargs.pop(n) for n in names if n in kwargs})
        return command(*args, **kwargs)

    grouped.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
    grouped.__annotations__ = {}  # typer asks for type hints; the signature has them
    return grouped


class GroupedTyper(typer.Typer):
    """A ``typer.Typer`` whose commands may take option groups: each command it registers
    goes through :func:`with_groups` first, so a command only declares a parameter of the
    group's type (``server: Reply``)."""

    def command(
        self, name: str | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        register = super().command(name, **kwargs)

        def decorate(command: CommandFunctionType) -> CommandFunctionType:
            register(with_groups(command))
            return command

        return decorate


def _is_group(annotation: Any) -> bool:
    """Whether a parameter's annotation is an option group (a dataclass)."""
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _default(field: dataclasses.Field[Any]) -> Any:
    """A group field's default as a parameter's (none: a required option)."""
    return inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default


def _fields(group: type[Any]) -> list[tuple[dataclasses.Field[Any], Any]]:
    """A dataclass's fields with their resolved (``Annotated``) types."""
    hints = typing.get_type_hints(group, include_extras=True)
    return [(f, hints[f.name]) for f in dataclasses.fields(group)]
