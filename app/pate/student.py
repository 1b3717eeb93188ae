"""Choosing the student prompt from the privately labelled public examples.

Everything here is post-processing of DP outputs: the examples are public inputs and their
labels came out of Confident-GNMax. Candidates are scored on a held-out part of those noisy
labels, never on private data (scoring on private validation records would be a release that
no accountant priced).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.llm.base import LLMBackend
from app.pate.config import PateError
from app.results import Demonstration
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import TaskSpec


@dataclass(frozen=True)
class StudentChoice:
    """The best candidate student prompt and how it was found."""

    demonstrations: tuple[Demonstration, ...]
    holdout_accuracy: float  # agreement with the holdout's noisy labels
    pool: int  # labelled examples candidates were drawn from
    holdout: int  # labelled examples candidates were scored on
    candidates: int


def split(n: int, shots: int, holdout_fraction: float, rng: np.random.Generator):
    """Random (pool, holdout) index arrays; the pool keeps at least ``shots`` examples."""
    if n < shots + 1:
        raise PateError(
            f"only {n} public input(s) were labelled; a student prompt of {shots} shot(s) "
            f"needs at least {shots + 1} (its shots and a holdout): raise epsilon, --queries "
            "or the public inputs, or lower the threshold"
        )
    size = min(n - shots, max(1, round(holdout_fraction * n)))
    order = rng.permutation(n)
    return order[size:], order[:size]


def draw_candidate(
    task: TaskSpec, pool: Sequence[Demonstration], shots: int, rng: np.random.Generator
) -> tuple[Demonstration, ...]:
    """``shots`` distinct pool examples, as label-balanced as the pool allows, in random order.

    Labels take turns (in a random order) until ``shots`` are drawn; a label that runs out is
    skipped, so an unbalanced pool still fills the prompt.
    """
    if len(pool) < shots:
        raise PateError(f"a pool of {len(pool)} example(s) cannot fill {shots} shot(s)")
    by_label: dict[str, list[int]] = {label: [] for label in task.labels}
    for i, demo in enumerate(pool):
        by_label.setdefault(demo.label, []).append(i)
    queues = [list(rng.permutation(idx)) for idx in by_label.values() if idx]
    queues = [queues[i] for i in rng.permutation(len(queues))]
    chosen: list[int] = []
    while len(chosen) < shots:
        for queue in queues:
            if queue and len(chosen) < shots:
                chosen.append(int(queue.pop()))
    return tuple(pool[i] for i in rng.permutation(chosen))


def holdout_accuracy(
    backend: LLMBackend,
    task: TaskSpec,
    demos: Sequence[Demonstration],
    holdout: Sequence[Demonstration],
) -> float:
    """Share of the holdout whose noisy label the prompt predicts (one backend call)."""
    prompt = demonstration_prompt(task, [(d.label, d.text) for d in demos])
    probs = label_probabilities(backend, task, prompt, [d.text for d in holdout])
    predicted = np.asarray(task.labels)[probs.argmax(axis=1)]
    return float(np.mean(predicted == np.asarray([d.label for d in holdout])))


def select_student(
    task: TaskSpec,
    labelled: Sequence[Demonstration],
    backend: LLMBackend,
    *,
    shots: int,
    candidates: int,
    holdout_fraction: float,
    rng: np.random.Generator,
) -> StudentChoice:
    """Score ``candidates`` random prompts on the holdout; the best (first on ties) wins."""
    pool_idx, holdout_idx = split(len(labelled), shots, holdout_fraction, rng)
    pool = [labelled[i] for i in pool_idx]
    holdout = [labelled[i] for i in holdout_idx]
    best: tuple[Demonstration, ...] = ()
    best_score = -1.0
    for _ in range(candidates):
        demos = draw_candidate(task, pool, shots, rng)
        score = holdout_accuracy(backend, task, demos, holdout)
        if score > best_score:
            best, best_score = demos, score
    return StudentChoice(best, best_score, len(pool), len(holdout), candidates)
