"""What every ``dpsyn`` command's help promises (issue 55, item 5), checked on the whole
command tree, so a command added later is held to it too: on/off options are flag pairs
(``--public/--no-public``) whose help shows no value to give; every option and argument has
help; every command and group shows an example that parses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from app.cli import app

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
