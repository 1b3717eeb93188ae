"""Student selection: split, balanced candidates, holdout scoring on noisy labels only."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from app.pate.config import PateError
from app.pate.student import draw_candidate, select_student, split
from app.results import Demonstration
from app.synthesis.prompts import demonstration_prompt
from tests.pate.fake_backend import PateFakeBackend
from tests.pate.helpers import SST2


def test_split_keeps_enough_for_the_shots_and_a_holdout():
    rng = np.random.default_rng(0)
    pool, holdout = split(20, 4, 0.3, rng)
    assert (len(pool), len(holdout)) == (14, 6)
    assert sorted([*pool, *holdout]) == list(range(20))
    pool, holdout = split(5, 4, 0.9, rng)
    assert (len(pool), len(holdout)) == (4, 1)
    with pytest.raises(PateError, match=r"only 4 public input\(s\) were labelled"):
        split(4, 4, 0.3, rng)


def test_candidates_are_label_balanced_when_the_pool_allows():
    pool = [Demonstration("positive", f"p{i}") for i in range(10)]
    pool += [Demonstration("negative", f"n{i}") for i in range(3)]
    rng = np.random.default_rng(1)
    for _ in range(20):
        demos = draw_candidate(SST2, pool, 4, rng)
        assert len(set(demos)) == 4
        assert Counter(d.label for d in demos) == {"positive": 2, "negative": 2}
    # an unbalanced pool still fills the prompt
    demos = draw_candidate(SST2, pool, 6, rng)
    assert Counter(d.label for d in demos) == {"positive": 3, "negative": 3}
    demos = draw_candidate(SST2, pool, 9, rng)
    assert Counter(d.label for d in demos) == {"positive": 6, "negative": 3}


def test_the_best_candidate_on_the_holdout_wins():
    # The fake answers a "mixed" query with the prompt's first demonstration label, so the
    # candidates' holdout accuracies differ with their first demonstration.
    labelled = [Demonstration("positive", f"mixed review {i}") for i in range(6)]
    labelled += [Demonstration("negative", f"mixed note {i}") for i in range(6)]
    backend = PateFakeBackend()
    choice = select_student(
        SST2,
        labelled,
        backend,
        shots=2,
        candidates=8,
        holdout_fraction=0.25,
        rng=np.random.default_rng(4),
    )
    assert (choice.pool, choice.holdout, choice.candidates) == (9, 3, 8)
    assert len(backend.calls) == 8  # one batched call per candidate, over the holdout
    assert all(len(call) == 3 for call in backend.calls)
    scores = [_accuracy_of_call(call, labelled) for call in backend.calls]
    assert len(set(scores)) > 1  # the choice matters
    best = scores.index(max(scores))  # ties: the first
    assert choice.holdout_accuracy == max(scores)
    chosen = demonstration_prompt(SST2, [(d.label, d.text) for d in choice.demonstrations])
    prefix = backend.detokenize(backend.tokenize(chosen))
    assert backend.calls[best][0].startswith(prefix)


def _query(prompt: str) -> str:
    words = prompt.split(" ")
    start = len(words) - 1 - words[::-1].index("Review:")
    return " ".join(w for w in words[start + 1 : -1] if w != "\n")


def _accuracy_of_call(call: list[str], labelled: list[Demonstration]) -> float:
    """A candidate's holdout accuracy, recomputed from the prompts the backend saw."""
    answer = PateFakeBackend().answer
    gold = {d.text: d.label for d in labelled}
    return float(np.mean([answer(p.split(" ")) == gold[_query(p)] for p in call]))
