"""README's privacy commands print what README says they print.

README shows ``dpsyn privacy epsilon``, ``privacy calibrate``, ``privacy plan`` and ``privacy
quote`` with the answer under some of them as a comment (``# {"epsilon": 10.28, ...}``, ``#
tang: epsilon = 3.9996 ...``). They drifted once (7.678 printed as 7.679): each command here is
read from README itself, run through the CLI, and every number of its comment must be in what
it prints (the JSON one compared as JSON), and so must every label it names in quotes and
every sensitivity it shows (issue 52: the quote's example named a label the command no longer
printed).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app as cli

README = Path(__file__).resolve().parents[2] / "README.md"
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?:e-?\d+)?")
QUOTED = re.compile(r"'[^']+'")
SENSITIVITY = re.compile(r"L[12] sensitivity [^)]*")


def examples() -> list[tuple[list[str], list[str]]]:
    """Each ``dpsyn privacy ...`` command of README (continuation lines joined) with the
    comment lines right under it."""
    lines = README.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".venv/bin/dpsyn privacy "):
            command = line
            while command.rstrip().endswith("\\"):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i].strip()
            comments = []
            while i + 1 < len(lines) and lines[i + 1].startswith("# "):
                i += 1
                comments.append(lines[i][2:])
            words = shlex.split(command.split(" #", 1)[0])[1:]
            found.append((words, comments))
        i += 1
    return found


EXAMPLES = examples()


def test_readme_shows_the_privacy_commands() -> None:
    shown = {words[1] for words, _ in EXAMPLES}
    assert {"epsilon", "calibrate", "plan", "quote"} <= shown
    assert sum(1 for _, comments in EXAMPLES if comments) >= 2


@pytest.mark.parametrize(
    ("words", "comments"),
    [example for example in EXAMPLES if example[1]],
    ids=lambda value: (
        value[1] if isinstance(value, list) and value and value[0] == "privacy" else ""
    ),
)
def test_a_readme_example_prints_what_readme_says(words: list[str], comments: list[str]) -> None:
    result = CliRunner().invoke(cli, words)
    assert result.exit_code == 0, result.output
    said = comments[0]
    if said.startswith("{"):
        shown_json, _, aside = said.partition("}")
        printed = json.loads(result.stdout)
        for name, shown in json.loads(shown_json + "}").items():
            assert _as_shown(printed[name], shown) == shown, (name, printed[name], shown)
        _check_aside(words, aside)
        return
    printed = result.stdout
    for number in NUMBER.findall(" ".join(comments)):
        assert number in printed, f"README says {number}; the command printed:\n{printed}"
    # the labels it names ('Location' was shown where the command printed 'Number'), and the
    # sensitivity each mechanism is shown with
    for quoted in QUOTED.findall(" ".join(comments)):
        assert quoted in printed, f"README says {quoted}; the command printed:\n{printed}"
    for stated in SENSITIVITY.findall(" ".join(c.strip() for c in comments)):
        assert stated in printed, f"README says {stated}; the command printed:\n{printed}"


def _as_shown(value: object, shown: object) -> object:
    """``value`` rounded as README writes ``shown`` (10.2838... as 10.28)."""
    if isinstance(shown, float) and isinstance(value, float) and "e" not in repr(shown):
        return round(value, len(repr(shown).split(".")[1]))
    return value


def _check_aside(words: list[str], aside: str) -> None:
    """``(at --delta X, ...: Y)``: the same command at that delta prints epsilon Y."""
    found = re.search(r"at --delta ([\d.e-]+).*?: ([\d.]+)\)", aside)
    if found is None:
        return
    result = CliRunner().invoke(cli, [*words, "--delta", found[1]])
    assert result.exit_code == 0, result.output
    epsilon = json.loads(result.stdout)["epsilon"]
    assert _as_shown(epsilon, float(found[2])) == float(found[2]), (epsilon, found[2])
