"""Option groups (app.cli.options): a group of options declared once as a dataclass, laid out
in place of the parameter that names it. Every client command gets ``--url``, ``--key`` (and
``--json`` where it prints the server's JSON) from one declaration; ``jobs submit`` and ``jobs
quote`` share theirs the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from app.cli import app
from app.cli.options import GroupedTyper, with_groups

CLIENT_GROUPS = ("datasets", "budget", "jobs", "prompts", "keys")


@dataclass(frozen=True)
class _Where:
    place: Annotated[str, typer.Option("--place", help="Required: no default.")]
    floor: Annotated[int, typer.Option("--floor")] = 0


def _toy() -> GroupedTyper:
    toy = GroupedTyper()

    @toy.command("go")
    def go(
        first: Annotated[str, typer.Option("--first")] = "a",
        *,
        where: _Where,
        last: Annotated[bool, typer.Option("--last")] = False,
    ) -> None:
        typer.echo(f"{first} {where} {last}")

    @toy.command("plain")
    def plain(name: Annotated[str, typer.Argument()]) -> None:
        typer.echo(name)

    return toy


def test_a_group_is_built_from_its_options_and_stands_in_its_place():
    toy = _toy()
    command = typer.main.get_command(toy)
    names = [param.name for param in command.commands["go"].params]  # type: ignore[attr-defined]
    assert names == ["first", "place", "floor", "last"]
    result = CliRunner().invoke(toy, ["go", "--place", "hall", "--floor", "3", "--last"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "a _Where(place='hall', floor=3) True"


def test_a_field_without_a_default_is_a_required_option():
    result = CliRunner().invoke(_toy(), ["go", "--floor", "3"])
    assert result.exit_code == 2
    assert "--place" in result.output


def test_a_command_without_a_group_is_unchanged():
    result = CliRunner().invoke(_toy(), ["plain", "x"])
    assert result.exit_code == 0 and result.output.strip() == "x"


def test_with_groups_leaves_the_function_callable_as_written():
    """The module keeps the function as defined (GroupedTyper registers the wrapper)."""

    def command(where: _Where) -> str:
        return where.place

    assert with_groups(command)(place="p", floor=1) == "p"


def _client_commands() -> dict[str, Any]:
    """The click commands of the client groups, by ``group command``."""
    root: Any = typer.main.get_command(app)
    return {
        f"{group} {name}": command
        for group in CLIENT_GROUPS
        for name, command in root.commands[group].commands.items()
    }


def test_the_client_groups_have_their_commands():
    """The control for the test below: it walks every command of the five groups."""
    assert {"datasets upload", "budget ledger", "jobs quote", "prompts get", "keys revoke"} <= set(
        _client_commands()
    )


@pytest.mark.parametrize("name", sorted(_client_commands()))
def test_every_client_command_takes_the_server_options(name):
    options = {param.name: param for param in _client_commands()[name].params}
    assert options["url"].envvar == "DPSYN_URL", name
    assert options["key"].envvar == "DPSYN_API_KEY", name
    assert options["url"].opts == ["--url"] and options["key"].opts == ["--key"]


def test_jobs_submit_and_quote_take_the_same_job_options():
    commands = _client_commands()
    submit = {p.name: (p.opts, p.required, p.help) for p in commands["jobs submit"].params}
    quote = {p.name: (p.opts, p.required, p.help) for p in commands["jobs quote"].params}
    shared = set(submit) & set(quote)
    assert {"dataset", "epsilon", "method", "validation_dataset", "param", "as_json"} <= shared
    assert all(submit[name] == quote[name] for name in shared)
    assert submit["dataset"][1] and submit["epsilon"][1]  # required in both
