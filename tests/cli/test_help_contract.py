"""What every ``dpsyn`` command's help promises (issue 55, item 5), checked on the whole
command tree, so a command added later is held to it too: on/off options are flag pairs
(``--public/--no-public``) whose help shows no value to give; every option and argument has
help; every command and group shows an example that parses."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer._click.exceptions import UsageError  # typer's own click: its parser's errors
from typer.testing import CliRunner

from app.cli import app
from app.cli.examples import EXAMPLES

ROOT: Any = typer.main.get_command(app)
#: Typer's and click's own options (``--help``, the shell completion ones): not ours to name.
BUILT_IN = {"help", "install_completion", "show_completion"}


def _tree(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _tree(sub, (*path, name))


COMMANDS = list(_tree(ROOT, ()))
IDS = [" ".join(("dpsyn", *path)) for path, _ in COMMANDS]


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_tree_holds_every_command() -> None:
    """The walk reaches the leaves (so the checks below are not vacuous)."""
    assert ("datasets", "upload") in dict(COMMANDS)
    assert ("admin", "keys", "create") in dict(COMMANDS)
    assert len(COMMANDS) >= 60


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_on_off_option_is_a_flag_pair(path: tuple[str, ...], command: Any) -> None:
    """A bool option is a flag with its negative (``--public/--no-public``): neither takes a
    value, and a script can say either."""
    for param in command.params:
        if param.param_type_name != "option" or param.name in BUILT_IN:
            continue
        if param.is_flag or param.type_descriptor.annotation is bool:
            assert param.is_flag, (path, param.opts)
            negatives = [opt for opt in param.secondary_opts if opt.startswith("--no-")]
            assert negatives, f"{' '.join(path)} {param.opts[0]}: no --no- form"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_help_shows_no_flag_as_a_value(path: tuple[str, ...], command: Any) -> None:
    """Help showed ``--public <bool>``, so users wrote ``--public true`` and were refused."""
    assert "<bool>" not in _help(path)


def test_the_negative_form_is_accepted() -> None:
    """``--no-public`` parses (and ``--public true`` is still refused: a flag takes no
    value, and help no longer suggests one)."""
    upload = ROOT.commands["datasets"].commands["upload"]
    ctx = upload.make_context("upload", ["f.csv", "--task", "trec", "--no-public"])
    assert ctx.params["public"] is False
    ctx = upload.make_context("upload", ["f.csv", "--public", "--no-labelled"])
    assert ctx.params["public"] is True


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_option_and_argument_has_help(path: tuple[str, ...], command: Any) -> None:
    """Eight options had none (``audit --dataset``, ``budget set --accounting``,
    ``synthesize --backend`` ...)."""
    bare = [param.opts[0] for param in command.params if not (param.help or "").strip()]
    assert not bare, f"dpsyn {' '.join(path)}: no help for {bare}"


def _flat(text: str) -> str:
    """Help text with its line wrapping undone (an example may wrap in a narrow terminal)."""
    return " ".join(text.split())


def _parse(words: list[str]) -> None:
    """Parse ``dpsyn WORDS`` as the command line would, without running it: each command
    word must name a command, and the command must accept the options, their values and
    arguments, with its required ones given (click raises a usage error otherwise)."""
    command, name, rest = ROOT, "dpsyn", list(words)
    while getattr(command, "commands", None):
        assert rest and rest[0] in command.commands, f"no command {rest[:1]} in {name}"
        name = rest.pop(0)
        command = command.commands[name]
    command.make_context(name, rest)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_command_shows_an_example_of_itself(path: tuple[str, ...], command: Any) -> None:
    """Issue 55: 54 help entries, none with an example. Every command and group shows at
    least one ``$ dpsyn ...`` line that runs it (a group: one of its commands)."""
    text = _flat(_help(path))
    assert "Examples:" in text, f"dpsyn {' '.join(path)}: no examples"
    assert f"$ {' '.join(('dpsyn', *path))}" in text, f"dpsyn {' '.join(path)}: none of its own"


@pytest.mark.parametrize(("path", "lines"), EXAMPLES.items(), ids=list(EXAMPLES))
def test_every_example_is_shown_and_parses(
    path: str, lines: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale example (a renamed option, a missing required one, a value of the wrong
    type, a command that moved) fails here, not in a user's terminal. (A file an example
    names in this folder is made empty first, for a command that checks it exists.)"""
    monkeypatch.chdir(tmp_path)
    for line in lines:
        for word in shlex.split(line, comments=True):
            if "/" not in word and Path(word).suffix in {".json", ".csv", ".key"}:
                Path(word).touch()
    words = tuple(path.split())
    assert words in dict(COMMANDS), f"examples for 'dpsyn {path}', which is no command"
    shown = _flat(_help(words))
    for line in lines:
        assert f"$ {_flat(line)}" in shown, line
        argv = shlex.split(line, comments=True)
        assert argv[0] == "dpsyn" and tuple(argv[1 : 1 + len(words)]) == words, line
        _parse(argv[1:])


@pytest.mark.parametrize(
    "line",
    [
        "dpsyn jobs list --bogus",  # no such option
        "dpsyn budget set DATASET",  # --epsilon is required
        "dpsyn jobs submit --dataset D --epsilon eight",  # not a number
        "dpsyn jobs sumbit --dataset D --epsilon 8",  # no such command
        "dpsyn datasets upload f.csv --public true",  # a flag takes no value
    ],
)
def test_a_stale_example_does_not_parse(line: str) -> None:
    """The check above is not vacuous: what a stale example would say is refused."""
    with pytest.raises((AssertionError, UsageError)):
        _parse(shlex.split(line)[1:])


def test_a_plugin_methods_on_off_parameter_is_a_flag_pair() -> None:
    """Method options are made from the registry: a plug-in's bool parameter gets the pair
    too (no built-in method has one, so the tree above cannot show it)."""
    from app.cli.method_options import MethodOption

    assert MethodOption("--greedy", bool, shots=False).declaration() == "--greedy/--no-greedy"
    assert MethodOption("--K", int, shots=False).declaration() == "--K"
