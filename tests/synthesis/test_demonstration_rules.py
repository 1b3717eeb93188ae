"""Demonstrations that say something (issue 43): on a hidden 14-label task the prompts served
"The" (one word) and "Mean of Transportation" (the label's own name). Such a demonstration is
left out like an empty one, counted in the job's stats and named in the prompt's notes; the
minimum is the job's ``min_words`` (default 2), a public rule applied to DP outputs."""

from __future__ import annotations

from typing import Any

import pytest

from app.llm.fake import FakeBackend
from app.methods.token_loop import empty_notes, left_out_reason
from app.synthesis.config import DEFAULT_MIN_WORDS, SynthesisConfig
from app.synthesis.generator import _demonstrations, _Shot
from app.synthesis.tasks import TaskSpec

TASK = TaskSpec(
    name="dbpedia-like",
    kind="classification",
    instruction="Given a category, write a short article title of that category.",
    icl_instruction="Classify the titles by category.",
    text_field="Title",
    label_field="Category",
    labels=["Mean of Transportation", "Company", "Artist"],
)


def _served(texts: list[tuple[str, str]], min_words: int) -> tuple[list[Any], dict[str, int]]:
    backend = FakeBackend()
    shots = []
    for index, (label, _) in enumerate(texts):
        shot = _Shot(label, label)
        shot.generated, shot.done = [index], True
        shots.append(shot)
    original = backend.detokenize
    backend.detokenize = lambda ids: texts[ids[0]][1]  # type: ignore[method-assign]
    try:
        return _demonstrations(shots, backend, TASK, min_words)
    finally:
        backend.detokenize = original  # type: ignore[method-assign]


WRITTEN = [
    ("Mean of Transportation", "Mean of Transportation"),
    ("Mean of Transportation", "mean of transportation."),
    ("Company", "The"),
    ("Company", "Company"),  # another label's word counts too
    ("Artist", "Jane Doe paints the sea"),
    ("Company", "Acme Corp makes rockets"),
]


def test_a_label_echo_and_a_one_word_demonstration_are_left_out_and_counted() -> None:
    demos, stats = _served(WRITTEN, DEFAULT_MIN_WORDS)
    assert [d.text for d in demos] == ["Jane Doe paints the sea", "Acme Corp makes rockets"]
    assert stats == {"echo_demonstrations": 3, "short_demonstrations": 1}


def test_the_prompts_notes_say_why_and_which_labels_lost_all_their_demonstrations() -> None:
    demos, stats = _served(WRITTEN, DEFAULT_MIN_WORDS)
    schedule = [label for label, _ in WRITTEN]
    notes = empty_notes(schedule, [d.label for d in demos], left_out_reason(stats, 2))
    assert notes == [
        "4 demonstrations (2 of label 'Company', 2 of label 'Mean of Transportation') only "
        "repeated a label's name or came out shorter than 2 words and were left out; the "
        "prompt holds 2 of the 6 planned.",
        "The prompt does not demonstrate label 'Mean of Transportation': every demonstration "
        "planned for it was left out.",
    ]


def test_the_minimum_is_the_jobs_own_parameter() -> None:
    """Negative control: at ``min_words`` 1 the one-word demonstration is served (an echo
    never is), so the rule above is the parameter's, not the text's."""
    demos, stats = _served(WRITTEN, 1)
    assert "The" in [d.text for d in demos]
    assert stats == {"echo_demonstrations": 3}
    assert SynthesisConfig(epsilon=1.0, M=2, N=1, tmax=3).min_words == DEFAULT_MIN_WORDS == 2
    with pytest.raises(ValueError, match="min_words"):
        SynthesisConfig(epsilon=1.0, M=2, N=1, tmax=3, min_words=0)
