"""A prompt's notes (``Method.prompt_notes``): the token loop's on demonstrations left out,
and none from a method that has nothing to add."""

from __future__ import annotations

import pytest

from app.methods.base import Stored
from app.methods.registry import MethodKind, get_method
from app.methods.token_loop import empty_notes


def _stored(schedule: list[str]) -> Stored:
    return Stored(config={}, schedule=schedule, delta=1e-5)


def test_a_prompt_that_holds_every_planned_demonstration_has_no_notes() -> None:
    assert empty_notes(["A", "B", "A"], ["B", "A", "A"]) == []
    for kind in (MethodKind.TANG, MethodKind.ADADPSYN):
        assert get_method(kind).prompt_notes(_stored(["A", "B"]), {}, ["A", "B"]) == []


def test_demonstrations_of_several_labels_left_out() -> None:
    notes = empty_notes(["Person", "Location", "Number", "Location"], ["Number"])
    assert notes == [
        "3 demonstrations (2 of label 'Location', 1 of label 'Person') came out empty (only "
        "whitespace after T_max tokens) and were left out; the prompt holds 1 of the 4 planned.",
        "The prompt does not demonstrate labels 'Location', 'Person': every demonstration "
        "planned for them came out empty.",
    ]


def test_a_label_that_keeps_one_of_its_demonstrations_is_still_demonstrated() -> None:
    notes = empty_notes(["A", "A", "B"], ["A", "B"])
    assert notes == [
        "1 demonstration of label 'A' came out empty (only whitespace after T_max tokens) and "
        "was left out; the prompt holds 2 of the 3 planned."
    ]


def test_a_prompt_left_with_no_demonstration_says_it_is_the_instruction_alone() -> None:
    notes = empty_notes(["A", "A"], [])
    assert notes[0].endswith("holds none of the 2 planned (it is the instruction alone).")
    assert notes[1].startswith("The prompt does not demonstrate label 'A':")


@pytest.mark.parametrize("kind", [MethodKind.PROMPTPATE, MethodKind.PROMPTDPSGD])
def test_methods_without_a_schedule_of_demonstrations_add_no_notes(kind: MethodKind) -> None:
    """PromptPATE's demonstrations are public texts it chose, PromptDPSGD has none: nothing
    was planned per label, so the default (no notes) holds."""
    assert get_method(kind).prompt_notes(_stored([]), {"queries_answered": 3}, ["A"]) == []
