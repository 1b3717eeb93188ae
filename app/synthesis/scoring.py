"""The one way a prompt answers queries: label scores and extracted values.

Why one module: ``/complete`` serves answers, ``dpsyn eval`` reports accuracy, PromptPATE's
teachers vote and its student is chosen, and ``dpsyn audit`` attacks membership, all by
asking a prompted model the same question. When each had its own copy (different prefix
rules, first-token only in the audit, 8 extraction tokens in eval and 12 in ``/complete``)
the accuracy eval reported was not the accuracy of what ``/complete`` answers. Everything
that scores a prompt now calls these functions; they live beside
:mod:`app.synthesis.prompts` because they depend on how a prompt and an answer are written,
and they import neither the web, the database nor the evaluation package.

**Classification.** After ``prompt + query_suffix(task, query)`` every label's answer
(:func:`~app.synthesis.prompts.answer_text`) is scored. When the answers start with
different tokens, a label's score is the probability of its first token, renormalised over
the labels. When answers share tokens, they form a trie and a label's score is the product,
along its path, of the probability of each next token among the tokens that continue the
labels still possible (one prompt per branching point). If one answer's tokens are a prefix
of another's (or equal, or empty), every answer gets a newline token appended, which is
what follows an answer in a prompt. All queries and branching points go to the backend in
**one** ``next_token_probs`` call: they share the prompt, whose KV cache a caching backend
computes once. Each query's scores are a distribution over ``task.labels``; the predicted
label is the first of the highest.

**Extraction.** Greedy (top-1) generation of up to :data:`MAX_EXTRACTION_TOKENS` tokens
after the query, all unfinished queries in one ``top_k`` call per step, stopped at a
newline or end of sequence; the first line, stripped, is the value.

Query texts go to the backend only; nothing here logs, stores or puts them in an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.llm.base import LLMBackend
from app.synthesis.prompts import answer_text, query_suffix
from app.synthesis.tasks import TaskKind, TaskSpec

#: Tokens an extracted value may have (what ``/complete`` always served).
MAX_EXTRACTION_TOKENS = 12


class ScoringError(ValueError):
    """The prompt cannot answer as asked (the message names task labels, never a query)."""


def answer_sequences(backend: LLMBackend, task: TaskSpec) -> dict[str, list[int]]:
    """Token ids of each label's answer, made prefix-free with a newline when needed."""
    return choice_sequences(backend, {label: answer_text(task, label) for label in task.labels})


def choice_sequences(
    backend: LLMBackend, answers: Mapping[str, str], what: str = "labels"
) -> dict[str, list[int]]:
    """Token ids of each answer text (by its key), made prefix-free with a newline when
    needed: a label's answer, or any fixed set of answers (the OpenAI routes' choices).
    ``what`` names the keys in the error for two answers with the same tokens."""
    seqs = {key: backend.tokenize(text) for key, text in answers.items()}
    values = list(seqs.values())
    prefix_clash = any(
        i != j and len(a) <= len(b) and b[: len(a)] == a
        for i, a in enumerate(values)
        for j, b in enumerate(values)
    )
    if prefix_clash or any(not s for s in values):
        end = (backend.tokenize("\n") or [backend.eos_id])[:1]
        seqs = {key: [*s, *end] for key, s in seqs.items()}
    seen: dict[tuple[int, ...], str] = {}
    for key, seq in seqs.items():
        if tuple(seq) in seen:
            raise ScoringError(
                f"{what} {seen[tuple(seq)]!r} and {key!r} have the same tokens for this "
                "model: they cannot be told apart"
            )
        seen[tuple(seq)] = key
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
        raise ScoringError(f"task {task.name!r} is not a classification task")
    if not queries:
        return np.zeros((0, len(task.labels)))
    seqs = answer_sequences(backend, task)
    contexts = [backend.tokenize(prompt + query_suffix(task, query)) for query in queries]
    return sequence_probabilities(backend, contexts, [seqs[label] for label in task.labels])


def sequence_probabilities(
    backend: LLMBackend, contexts: Sequence[Sequence[int]], seqs: Sequence[Sequence[int]]
) -> np.ndarray:
    """C x S array: each context's distribution over the prefix-free token sequences
    ``seqs`` (:func:`choice_sequences`), by the trie walk the module describes (one backend
    call for every context and branching point)."""
    points = _branch_points({str(k): list(seq) for k, seq in enumerate(seqs)})
    if not points:  # one sequence: nothing to choose
        return np.ones((len(contexts), len(seqs)))
    width = max(len(options) for _, options in points)
    # Pad short rows with a repeat of their first token; padded columns are dropped below.
    row_sets = [options + [options[0]] * (width - len(options)) for _, options in points]
    prompts: list[list[int]] = []
    sets: list[list[int]] = []
    for context in contexts:
        for (node, _), row in zip(points, row_sets, strict=True):
            prompts.append([*context, *node])
            sets.append(row)
    probs = np.asarray(backend.next_token_probs(prompts, np.array(sets)), dtype=np.float64)
    probs = probs.reshape(len(contexts), len(points), width)
    out = np.ones((len(contexts), len(seqs)))
    index = {node: k for k, (node, _) in enumerate(points)}
    for q in range(len(contexts)):
        step: dict[tuple[tuple[int, ...], int], float] = {}
        for k, (node, options) in enumerate(points):
            p = probs[q, k, : len(options)]
            total = p.sum()
            p = p / total if total > 0 else np.full(len(options), 1.0 / len(options))
            step.update({(node, t): float(v) for t, v in zip(options, p, strict=True)})
        for col, seq in enumerate(seqs):
            for j in range(len(seq)):
                if tuple(seq[:j]) in index:
                    out[q, col] *= step[(tuple(seq[:j]), seq[j])]
    return out / out.sum(axis=1, keepdims=True)


def predict_labels(task: TaskSpec, probs: np.ndarray) -> list[str]:
    """The label of each row's highest score (the first of equal ones, in label order)."""
    return [task.labels[int(i)] for i in np.asarray(probs).argmax(axis=1)]


def label_scores(backend: LLMBackend, task: TaskSpec, prompt: str, query: str) -> dict[str, float]:
    """One query's scores by label: a row of :func:`label_probabilities`."""
    row = label_probabilities(backend, task, prompt, [query])[0]
    return {label: float(p) for label, p in zip(task.labels, row, strict=True)}


def extract_values(
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
