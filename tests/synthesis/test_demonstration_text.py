"""A demonstration is never cut inside a word (issue 24): one that T_max stopped ends at its
last whole word and is marked; one that reached its stop token is kept as generated."""

from __future__ import annotations

import pytest

from app.synthesis.generator import TRUNCATED, demonstration_text

CUT = " What is the formula for the area of a tri"


@pytest.mark.parametrize(
    ("text", "finished", "expected"),
    [
        (CUT, False, f"What is the formula for the area of a {TRUNCATED}"),
        ("What is the capital of France ?", False, f"What is the capital of France ? {TRUNCATED}"),
        ("Who wrote it.", False, f"Who wrote it. {TRUNCATED}"),
        ("Supercalifragilistic", False, f"Supercalifragilistic {TRUNCATED}"),
        (CUT, True, CUT.strip()),
        ("   ", False, ""),
    ],
)  # fmt: skip
def test_demonstration_text(text: str, finished: bool, expected: str) -> None:
    assert demonstration_text(text, finished) == expected
