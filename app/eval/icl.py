"""Accuracy of a demonstration prompt on test queries, over any :class:`LLMBackend`.

Pure functions: no files, no logging, nothing printed. Query texts are used for backend calls
only and never returned except as the caller's own predictions.

**Scoring** is :mod:`app.synthesis.scoring`, the code ``/complete`` answers with, so the
accuracy reported here is the accuracy of the answers the service gives for the same prompt
and queries (same label trie, same prefix rule, same extraction length). All queries and the
content-free inputs of calibration go to the backend in **one** ``next_token_probs`` call.

**Contextual calibration** (Zhao et al. 2021), an evaluation-only view that ``/complete``
does not apply: the label distributions of content-free inputs (``"N/A"``, ``""``,
``"[MASK]"``) are averaged; each query's label probabilities are divided by that mean and
renormalised.

**Extraction.** A prediction is correct when it equals the gold value after :func:`normalise`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.llm.base import LLMBackend
from app.synthesis.data import Record
from app.synthesis.scoring import (
    ScoringError,
    extract_values,
    label_probabilities,
    predict_labels,
)
from app.synthesis.tasks import TaskKind, TaskSpec

CONTENT_FREE = ("N/A", "", "[MASK]")


class EvalError(ScoringError):
    """The evaluation cannot run as asked (the message never contains a query or record)."""


def contextual_calibration(probs: np.ndarray, content_free: np.ndarray) -> np.ndarray:
    """Contextual calibration: divide each row by the mean content-free distribution and
    renormalise. (Noise calibration, the privacy side, is :mod:`app.privacy.calibration`'s.)"""
    mean = np.asarray(content_free, dtype=np.float64).reshape(-1, probs.shape[1]).mean(axis=0)
    scaled = np.asarray(probs, dtype=np.float64) / np.maximum(mean, 1e-12)
    return scaled / scaled.sum(axis=1, keepdims=True)


def accuracy(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Fraction of equal pairs (0 for no pairs)."""
    if len(predicted) != len(gold):
        raise EvalError(f"{len(predicted)} predictions for {len(gold)} gold answers")
    if not gold:
        return 0.0
    return sum(p == g for p, g in zip(predicted, gold, strict=True)) / len(gold)


_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")


def normalise(text: str) -> str:
    """Lowercase, punctuation removed, whitespace runs collapsed and trimmed."""
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def exact_match(predicted: str, gold: str) -> bool:
    return normalise(predicted) == normalise(gold)


@dataclass(frozen=True)
class Score:
    """Result of one prompt on one test set (no query text, no predictions)."""

    accuracy: float
    calibrated_accuracy: float | None
    n: int


def evaluate(
    backend: LLMBackend,
    task: TaskSpec,
    prompt: str,
    test: Sequence[Record],
    *,
    calibrated: bool = True,
    content_free: Sequence[str] = CONTENT_FREE,
) -> Score:
    """Accuracy of ``prompt`` on ``test`` (and, for classification, calibrated accuracy).

    Classification scores the queries and the content-free inputs in one backend call.
    """
    if not test:
        raise EvalError("the test set is empty")
    gold = [r.label for r in test]
    queries = [r.text for r in test]
    if task.kind == TaskKind.EXTRACTION:
        predicted = extract_values(backend, task, prompt, queries)
        correct = sum(exact_match(p, g) for p, g in zip(predicted, gold, strict=True))
        return Score(correct / len(test), None, len(test))
    extra = list(content_free) if calibrated else []
    probs = label_probabilities(backend, task, prompt, [*queries, *extra])
    acc = accuracy(predict_labels(task, probs[: len(test)]), gold)
    cal = None
    if calibrated and extra:
        fixed = contextual_calibration(probs[: len(test)], probs[len(test) :])
        cal = accuracy(predict_labels(task, fixed), gold)
    return Score(acc, cal, len(test))
