"""The docs table of method parameters is generated from the registry (``app.methods.docs``)
and the committed one in docs/service.md is exactly the generated one."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.methods.docs import BEGIN, END, main, parameter_table, with_table
from app.methods.registry import registered
from app.pate.config import PateConfig
from tests.methods.echo import ECHO

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def test_the_committed_table_is_the_generated_one() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text
    assert with_table(text) == text, (
        "docs/service.md's method parameters are stale: run "
        "python -m app.methods.docs --write docs/service.md"
    )


def test_a_row_holds_the_configs_type_default_bounds_and_the_flag() -> None:
    teachers = PateConfig.model_fields["teachers"]
    row = next(line for line in parameter_table().splitlines() if "`teachers`" in line)
    assert row == (
        "| promptpate | `teachers` | `--teachers` | int | "
        f"{teachers.default} | [1, 10000] | {teachers.description} |"
    )
    # The job's shots have no fixed default: one per label for a task of few labels.
    assert (
        "| tang, adadpsyn | `shots` (the job's) | `--shots` | int | - | [1, 64] | "
        "Demonstrations to generate; default one per label for a task of at most 8 labels"
    ) in parameter_table()


def test_a_registered_method_changes_the_table(tmp_path: Path) -> None:
    """The negative control: the committed table would be stale with another method."""
    text = DOC.read_text()
    with registered(ECHO):
        table = parameter_table()
        assert "| echo | `repeat` | `--echo-repeat` | int | 2 | [1, 5] |" in table
        assert "| tang, adadpsyn, echo | `shots` (the job's) |" not in table  # own declaration
        assert with_table(text) != text
        copy = tmp_path / "service.md"
        copy.write_text(text)
        assert main(["--write", str(copy)]) == 0
        assert "`--echo-repeat`" in copy.read_text()
    assert with_table(text) == text
    with pytest.raises(ValueError, match="block"):
        with_table("no markers")
