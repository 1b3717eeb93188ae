"""Options anywhere (issue 43: "options only after the subcommand"; issue 55: ``--json``
before the command was still refused): ``--url``, ``--key`` and ``--json``, which every
client command takes, are accepted before the command and between its words too, through
the real console script; a command that does not take one says so, naming itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import MisplacedOptionError, hoist_global_options

DPSYN = Path(sys.executable).with_name("dpsyn")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ("--url U jobs list --limit 3", "jobs list --limit 3 --url U"),
        ("jobs --key=K list", "jobs list --key=K"),
        ("--key K budget --url U show ds", "budget show ds --key K --url U"),
        ("jobs list --url U", "jobs list --url U"),  # already after the command
        ("--help", "--help"),
        ("datasets upload f.csv --name --url", "datasets upload f.csv --name --url"),
        ("--json jobs list", "jobs list --json"),
        ("jobs --no-json show J", "jobs show J --no-json"),
        ("--json --url=U budget --key K show ds", "budget show ds --json --url=U --key K"),
        ("--json jobs list --help", "jobs list --help"),  # help runs, nothing else
        ("--json jbos list", "jbos list --json"),  # click names the unknown command
    ],
)
def test_global_options_move_after_the_command(argv: str, expected: str) -> None:
    assert hoist_global_options(argv.split()) == expected.split()


def test_the_console_script_takes_the_url_before_the_command() -> None:
    """Before: "No such option: --url" (exit 2). Now the command reads it: it tries that
    server and says it cannot reach it (exit 1), naming the URL given first."""
    result = subprocess.run(
        [str(DPSYN), "--url", "http://127.0.0.1:9", "--key", "k" * 40, "jobs", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "cannot reach the dpsyn server at http://127.0.0.1:9" in result.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("--json prompts download P", "'dpsyn prompts download' takes no --json option"),
        ("--json serve", "'dpsyn serve' takes no --json option"),
        ("--url U migrate", "'dpsyn migrate' takes no --url option"),
        ("--json jobs", "'dpsyn jobs' needs a command after it, which takes --json"),
    ],
)
def test_an_option_the_command_does_not_take_is_refused_by_name(argv: str, message: str) -> None:
    """Not dropped (a script asking for JSON would read text) and not click's bare "No such
    option", which read as if the option's place were wrong."""
    with pytest.raises(MisplacedOptionError, match=message):
        hoist_global_options(argv.split())


def test_the_console_script_takes_json_before_the_command() -> None:
    """Before: "No such option: --json" (exit 2). Now ``jobs list`` reads it and tries the
    server."""
    result = subprocess.run(
        [str(DPSYN), "--json", "--url", "http://127.0.0.1:9", "jobs", "--key", "k" * 40, "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "cannot reach the dpsyn server at http://127.0.0.1:9" in result.stderr


def test_the_console_script_names_a_command_without_the_option() -> None:
    result = subprocess.run(
        [str(DPSYN), "--json", "prompts", "download", "P"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: 'dpsyn prompts download' takes no --json option")
