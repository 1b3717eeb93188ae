"""Options anywhere (issue 43: "options only after the subcommand"): ``--url`` and ``--key``,
which every client command takes, are accepted before the command and between its words
too, through the real console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import hoist_global_options

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
