"""Synthesised prompt sets, and Stage 2: answering a query with one.

A prompt set is a differentially private output, so read-only keys may see it and use it.
The query a client sends is its own input: it is used for one backend call and never
stored, logged or echoed back.

**Classification** scores every label's answer (:func:`~app.synthesis.prompts.answer_text`)
after ``prompt + query_suffix(task, query)``. The context is tokenised once; when every
label's answer starts with a different token, one backend call over those first tokens gives
the scores (renormalised over the labels). When labels share first tokens, the answers'
tokens form a trie and the score of a label is the product, along its path, of the
probability of each next token among the tokens that continue the labels still possible
(one prompt per branching point, all in the same batched call). The scores are thus a
distribution over the labels that, without shared first tokens, is exactly the first-token
one. (If one answer's tokens are a prefix of another's, every answer gets a newline token
appended, which is what follows an answer in the prompt.)

**Extraction** generates greedily (top-1) up to :data:`MAX_EXTRACTION_TOKENS` tokens, to the
first newline or end of sequence, and returns the stripped text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import PromptSet
from app.llm.base import LLMBackend
from app.llm.provider import BackendProvider
from app.synthesis.prompts import answer_text, query_suffix
from app.synthesis.tasks import TaskKind, TaskSpec

from .errors import InvalidError, NotFoundError

MAX_EXTRACTION_TOKENS = 12


def get_prompt_set(session: Session, tenant_id: str, prompt_id: str) -> PromptSet:
    prompt_set = session.scalars(
        select(PromptSet).where(PromptSet.id == prompt_id, PromptSet.tenant_id == tenant_id)
    ).first()
    if prompt_set is None:
        raise NotFoundError(f"prompt {prompt_id!r} not found")
    return prompt_set


def list_prompt_sets(
    session: Session,
    tenant_id: str,
    *,
    dataset_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[PromptSet]:
    query = select(PromptSet).where(PromptSet.tenant_id == tenant_id)
    if dataset_id is not None:
        query = query.where(PromptSet.dataset_id == dataset_id)
    query = query.order_by(PromptSet.created_at.desc(), PromptSet.id).limit(limit).offset(offset)
    return list(session.scalars(query))


@dataclass(frozen=True)
class Completion:
    kind: TaskKind
    label: str | None = None
    scores: dict[str, float] | None = None
    value: str | None = None


def _answer_sequences(backend: LLMBackend, task: TaskSpec) -> dict[str, list[int]]:
    sequences = {label: backend.tokenize(answer_text(task, label)) for label in task.labels}
    values = list(sequences.values())
    if any(
        a is not b and len(a) < len(b) and b[: len(a)] == a for a in values for b in values
    ) or any(not s for s in values):
        end = (backend.tokenize("\n") or [backend.eos_id])[:1]
        sequences = {label: [*seq, *end] for label, seq in sequences.items()}
    seen: dict[tuple[int, ...], str] = {}
    for label, seq in sequences.items():
        if tuple(seq) in seen:
            raise InvalidError(
                f"labels {seen[tuple(seq)]!r} and {label!r} have the same tokens for this "
                "model: they cannot be told apart"
            )
        seen[tuple(seq)] = label
    return sequences


def score_labels(backend: LLMBackend, task: TaskSpec, context: str) -> dict[str, float]:
    """Probability of each label's answer after ``context``, in one batched backend call."""
    prefix_ids = backend.tokenize(context)
    sequences = _answer_sequences(backend, task)
    branches: dict[tuple[int, ...], list[int]] = {}
    for seq in sequences.values():
        for j, token in enumerate(seq):
            nexts = branches.setdefault(tuple(seq[:j]), [])
            if token not in nexts:
                nexts.append(token)
    decisions = [(node, nexts) for node, nexts in branches.items() if len(nexts) > 1]
    width = max(len(nexts) for _, nexts in decisions)
    prompts = [prefix_ids + list(node) for node, _ in decisions]
    # Pad short rows with a repeat of their first token; padded columns are dropped below.
    token_sets = np.array([nexts + [nexts[0]] * (width - len(nexts)) for _, nexts in decisions])
    probs = backend.next_token_probs(prompts, token_sets)
    step: dict[tuple[tuple[int, ...], int], float] = {}
    for (node, nexts), row in zip(decisions, probs, strict=True):
        p = np.asarray(row[: len(nexts)], dtype=np.float64)
        total = float(p.sum())
        p = p / total if total > 0 else np.full(len(nexts), 1.0 / len(nexts))
        step.update({(node, token): float(v) for token, v in zip(nexts, p, strict=True)})
    return {
        label: math.prod(step.get((tuple(seq[:j]), seq[j]), 1.0) for j in range(len(seq)))
        for label, seq in sequences.items()
    }


def extract_value(backend: LLMBackend, context: str) -> str:
    """Greedy continuation of ``context`` to the end of its line."""
    ids = backend.tokenize(context)
    stops = set(backend.newline_ids) | {backend.eos_id}
    generated: list[int] = []
    for _ in range(MAX_EXTRACTION_TOKENS):
        token = int(backend.top_k([ids + generated], 1)[0][0])
        if token in stops:
            break
        generated.append(token)
    return backend.detokenize(generated).split("\n", 1)[0].strip()


@dataclass(frozen=True)
class PromptSource:
    """What answering needs from a prompt set, detached from the database session."""

    id: str
    task: TaskSpec
    prompt: str

    @classmethod
    def from_row(cls, row: PromptSet) -> PromptSource:
        return cls(row.id, TaskSpec.model_validate(row.task), row.prompt)


def complete(source: PromptSource, query: str, provider: BackendProvider) -> Completion:
    """Answer ``query`` with a prompt (no database access: call it holding no transaction)."""
    task = source.task
    context = source.prompt + query_suffix(task, query)
    backend = provider.get()
    with provider.use_lock:
        if task.kind == TaskKind.CLASSIFICATION:
            scores = score_labels(backend, task, context)
            return Completion(task.kind, label=max(scores, key=scores.__getitem__), scores=scores)
        return Completion(task.kind, value=extract_value(backend, context))
