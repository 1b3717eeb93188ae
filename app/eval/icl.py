"""Scoring a demonstration prompt on test queries, over any :class:`LLMBackend`.

Pure functions: no files, no logging, nothing printed. Query texts are used for backend calls
only and never returned except as the caller's own predictions.

**Classification.** After ``prompt + query_suffix(task, query)`` every label's answer
(:func:`~app.synthesis.prompts.answer_text`) is scored. When the answers start with different
tokens, a label's score is the probability of its first token, renormalised over the labels.
When answers share tokens, they form a trie and a label's score is the product of the
probabilities of its tokens among the tokens that continue the labels still possible at each
branching point. All queries, all branching points and the content-free inputs of
calibration go to the backend in **one** ``next_token_probs`` call: they share the
demonstration prompt, whose KV cache the transformers backend computes once.

**Contextual calibration** (Zhao et al. 2021): the label distributions of content-free
inputs (``"N/A"``, ``""``, ``"[MASK]"``) are averaged; each query's label probabilities are
divided by that mean and renormalised.

**Extraction.** Greedy generation of up to ``max_tokens`` tokens after the query (all
unfinished queries in one ``top_k`` call per step), cut at the first line; a prediction is
correct when it equals the gold value after :func:`normalise`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.llm.base import LLMBackend
from app.synthesis.data import Record
from app.synthesis.prompts import answer_text, query_suffix
from app.synthesis.tasks import TaskKind, TaskSpec

CONTENT_FREE = ("N/A", "", "[MASK]")
MAX_EXTRACTION_TOKENS = 8


class EvalError(ValueError):
    """The evaluation cannot run as asked (the message never contains a query or record)."""


def label_sequences(backend: LLMBackend, task: TaskSpec) -> dict[str, list[int]]:
    """Token ids of each label's answer; a newline is appended when one is a prefix of another."""
    seqs = {label: backend.tokenize(answer_text(task, label)) for label in task.labels}
    values = list(seqs.values())
    prefix_clash = any(
        i != j and len(a) <= len(b) and b[: len(a)] == a
        for i, a in enumerate(values)
        for j, b in enumerate(values)
    )
    if prefix_clash or any(not s for s in values):
        end = (backend.tokenize("\n") or [backend.eos_id])[:1]
        seqs = {label: [*s, *end] for label, s in seqs.items()}
    if len({tuple(s) for s in seqs.values()}) < len(seqs):
        raise EvalError(f"two labels of task {task.name!r} have the same tokens for this model")
    return seqs


def _branch_points(seqs: dict[str, list[int]]) -> list[tuple[tuple[int, ...], list[int]]]:
    """(trie node, the distinct next tokens there) for every node with more than one."""
    nexts: dict[tuple[int, ...], list[int]] = {}
    for seq in seqs.values():
        for j, token in enumerate(seq):
            options = nexts.setdefault(tuple(seq[:j]), [])
            if token not in options:
                options.append(token)
    return [(node, options) for node, options in nexts.items() if len(options) > 1]


def label_probabilities(
    backend: LLMBackend, task: TaskSpec, prompt: str, queries: Sequence[str]
) -> np.ndarray:
    """Q x L array: each query's distribution over ``task.labels`` (one backend call)."""
    if task.kind != TaskKind.CLASSIFICATION:
        raise EvalError(f"task {task.name!r} is not a classification task")
    if not queries:
        return np.zeros((0, len(task.labels)))
    seqs = label_sequences(backend, task)
    points = _branch_points(seqs)
    width = max(len(options) for _, options in points)
    row_sets = [options + [options[0]] * (width - len(options)) for _, options in points]
    prompts, sets = [], []
    for query in queries:
        context = backend.tokenize(prompt + query_suffix(task, query))
        for (node, _), row in zip(points, row_sets, strict=True):
            prompts.append(context + list(node))
            sets.append(row)
    probs = np.asarray(backend.next_token_probs(prompts, np.array(sets)), dtype=np.float64)
    probs = probs.reshape(len(queries), len(points), width)
    out = np.ones((len(queries), len(task.labels)))
    index = {node: k for k, (node, _) in enumerate(points)}
    for q in range(len(queries)):
        step: dict[tuple[tuple[int, ...], int], float] = {}
        for k, (node, options) in enumerate(points):
            p = probs[q, k, : len(options)]
            total = p.sum()
            p = p / total if total > 0 else np.full(len(options), 1.0 / len(options))
            step.update({(node, t): float(v) for t, v in zip(options, p, strict=True)})
        for col, label in enumerate(task.labels):
            seq = seqs[label]
            for j in range(len(seq)):
                if tuple(seq[:j]) in index:
                    out[q, col] *= step[(tuple(seq[:j]), seq[j])]
    return out / out.sum(axis=1, keepdims=True)


def calibrate(probs: np.ndarray, content_free: np.ndarray) -> np.ndarray:
    """Divide each row by the mean content-free distribution and renormalise."""
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


def extract(
    backend: LLMBackend,
    task: TaskSpec,
    prompt: str,
    queries: Sequence[str],
    max_tokens: int = MAX_EXTRACTION_TOKENS,
) -> list[str]:
    """Greedy continuation of each query's answer line, first line only, stripped."""
    contexts = [backend.tokenize(prompt + query_suffix(task, q)) for q in queries]
    stops = set(backend.newline_ids) | {backend.eos_id}
    generated: list[list[int]] = [[] for _ in queries]
    active = list(range(len(queries)))
    for _ in range(max_tokens):
        if not active:
            break
        top = backend.top_k([contexts[i] + generated[i] for i in active], 1)
        still = []
        for i, row in zip(active, top, strict=True):
            token = int(row[0])
            if token in stops:
                continue
            generated[i].append(token)
            still.append(i)
        active = still
    return [backend.detokenize(ids).split("\n", 1)[0].strip() for ids in generated]


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
        predicted = extract(backend, task, prompt, queries)
        correct = sum(exact_match(p, g) for p, g in zip(predicted, gold, strict=True))
        return Score(correct / len(test), None, len(test))
    extra = list(content_free) if calibrated else []
    probs = label_probabilities(backend, task, prompt, [*queries, *extra])
    labels = np.array(task.labels)
    acc = accuracy(list(labels[probs[: len(test)].argmax(axis=1)]), gold)
    cal = None
    if calibrated and extra:
        fixed = calibrate(probs[: len(test)], probs[len(test) :])
        cal = accuracy(list(labels[fixed.argmax(axis=1)]), gold)
    return Score(acc, cal, len(test))
