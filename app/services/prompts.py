"""Synthesised prompt sets, and Stage 2: answering a query with one.

A prompt set is a differentially private output, so read-only keys may see it and use it.
The query a client sends is its own input: it is used for one backend call and never
stored, logged or echoed back.

Answers come from :mod:`app.synthesis.scoring`, the scorer ``dpsyn eval`` measures accuracy
with, PromptPATE votes with and ``dpsyn audit`` attacks: **classification** returns every
label's score (a distribution over the labels) and the highest; **extraction** returns the
greedy continuation of the answer line. Backend calls go through the one retry layer
(:mod:`app.llm.retry`), each attempt holding the provider's lock (a local model's forward
passes are not re-entrant), never while waiting.

**Validation** (a quality signal without privacy cost). A job may name a public labelled
dataset; once its prompt set is stored (status ``pending``), the worker scores the stored
prompt on up to :data:`VALIDATION_MAX_RECORDS` of that dataset's records with the same
scorer (through :func:`app.eval.icl.evaluate`, uncalibrated: the accuracy of the answers
``/complete`` gives) and writes ``{dataset_id, status: scored, n, accuracy}``, or
``not_scored`` with a reason that names no record. Its inputs are the DP output and public
records only, so it is post-processing: it costs no privacy and nothing is charged. A
scoring failure never fails the job or removes its prompt. A prompt whose score is still
pending is never kept in the API's body cache, so the score shows on the next read.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Dataset, DatasetKind, Job, PromptSet
from app.eval.icl import CONTENT_FREE, contextual_calibration, evaluate
from app.llm.base import LLMBackend
from app.llm.provider import BackendProvider
from app.llm.retry import RetryingBackend, RetryPolicy
from app.llm.vllm_http import VLLMHttpBackend
from app.methods.base import DemonstrationCount
from app.methods.registry import find_method
from app.promptdpsgd.artifact import SoftPrompt
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import (
    ScoringError,
    extract_values,
    label_probabilities,
    label_scores,
)
from app.synthesis.tasks import TaskKind, TaskSpec

from .datasets import load_records
from .errors import ConflictError, InvalidError, NotFoundError
from .key_cache import LruCache
from .record_reads import Reader
from .rows import stored_plan, tenant_page, tenant_row

#: Transient backend failures (vLLM restarting, overloaded) are retried twice within a request,
#: after 0.5 s and 1 s: a client waits at most ~1.5 s more before its 503, and can retry itself.
COMPLETE_RETRY = RetryPolicy(retries=2, base_delay_s=0.5)


def get_prompt_set(session: Session, tenant_id: str, prompt_id: str) -> PromptSet:
    return tenant_row(session, PromptSet, tenant_id, prompt_id, "prompt")


def newest_prompt_sets(session: Session, *, offset: int, limit: int) -> list[PromptSet]:
    """Every tenant's prompt sets, newest first (the API's start-up cache load only: what it
    reads is served to each prompt's own tenant, as a read would be)."""
    query = (
        select(PromptSet)
        .order_by(PromptSet.created_at.desc(), PromptSet.id)
        .offset(offset)
        .limit(limit)
    )
    return list(session.scalars(query))


def prompt_notes(session: Session, row: PromptSet) -> list[str]:
    """The prompt's notes (:meth:`app.methods.base.Method.prompt_notes`): what its job's
    method says of it, from the job's stored plan and public stats and the prompt's labels.

    Derived on each uncached read rather than stored, so that every prompt has them, those
    stored before notes existed included (no migration, nothing to backfill); a prompt never
    changes once stored, so neither do they. [] when the job's method is no longer
    registered."""
    job = session.get(Job, row.job_id)
    method = find_method(job.method) if job is not None else None
    if job is None or method is None:
        return []
    labels = [str(demo.get("label", "")) for demo in row.demonstrations or []]
    return method.prompt_notes(stored_plan(job), dict(job.stats or {}), labels)


def demonstration_count(session: Session, row: PromptSet) -> DemonstrationCount | None:
    """The demonstrations the prompt's job asked for, those the prompt serves (its own, as
    stored) and those left out by reason (:meth:`app.methods.base.Method.demonstration_count`,
    from the job's stored plan and public stats); None for a method that plans no count.
    Derived on read like the notes, so older prompts have it too."""
    job = session.get(Job, row.job_id)
    method = find_method(job.method) if job is not None else None
    if job is None or method is None:
        return None
    count = method.demonstration_count(stored_plan(job), dict(job.stats or {}))
    if count is None:
        return None
    return dataclasses.replace(count, served=len(row.demonstrations or []))


def list_prompt_sets(
    session: Session,
    tenant_id: str,
    *,
    dataset_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[PromptSet]:
    where = [] if dataset_id is None else [PromptSet.dataset_id == dataset_id]
    return tenant_page(session, PromptSet, tenant_id, *where, limit=limit, offset=offset)


@dataclass(frozen=True)
class SoftPromptFile:
    """A prompt set's soft prompt as the download serves it: the safetensors bytes and the
    SHA-256 they were stored with (checked here, so a damaged file is never served)."""

    prompt_id: str
    data: bytes
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.prompt_id}.safetensors"


class SoftPromptCorruptError(RuntimeError):
    """The stored bytes do not hash to the stored SHA-256 (the store damaged them)."""


def get_soft_prompt_file(session: Session, tenant_id: str, prompt_id: str) -> SoftPromptFile:
    """The soft prompt of the tenant's prompt ``prompt_id``: 404 if there is no such prompt
    (another tenant's included) or if the prompt has none (it is made of demonstrations)."""
    prompt_set = get_prompt_set(session, tenant_id, prompt_id)
    data, sha256 = prompt_set.soft_prompt, prompt_set.soft_prompt_sha256
    if data is None or sha256 is None:
        raise NotFoundError(
            f"prompt {prompt_id!r} has no soft prompt: it was made by method "
            f"{prompt_set.method}, whose prompt is its demonstrations (only promptdpsgd "
            "trains a soft prompt)",
            code="no_soft_prompt",
        )
    data = bytes(data)  # PostgreSQL's driver returns a memoryview
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SoftPromptCorruptError(f"prompt {prompt_id}: stored soft prompt fails its SHA-256")
    return SoftPromptFile(prompt_set.id, data, sha256)


@dataclass(frozen=True)
class Completion:
    kind: TaskKind
    label: str | None = None
    scores: dict[str, float] | None = None
    value: str | None = None
    # Classification: "contextual" when the scores were calibrated (:func:`complete`), else
    # "none"; every answer states which.
    calibration: str | None = None


@dataclass(frozen=True)
class PromptSource:
    """What answering needs from a prompt set, detached from the database session: for a
    PromptDPSGD prompt set also its soft prompt (the only read of the stored bytes besides
    the download)."""

    id: str
    task: TaskSpec
    prompt: str
    soft_prompt: SoftPrompt | None = None

    @classmethod
    def from_row(cls, row: PromptSet) -> PromptSource:
        soft = None
        if row.soft_prompt_sha256 is not None:
            data = bytes(row.soft_prompt or b"")
            if hashlib.sha256(data).hexdigest() != row.soft_prompt_sha256:
                raise SoftPromptCorruptError(
                    f"prompt {row.id}: stored soft prompt fails its SHA-256"
                )
            soft = SoftPrompt.from_bytes(data)
        return cls(row.id, TaskSpec.model_validate(row.task), row.prompt, soft)


def soft_prompted(source: PromptSource, soft: SoftPrompt, provider: BackendProvider) -> LLMBackend:
    """The provider's model with ``soft`` in front of every prompt (the local model's forward
    pass, or vLLM's prompt embeddings: ``app.promptdpsgd.vllm``), or a 409 naming why it
    cannot be: another model than the one the soft prompt was trained for (its embeddings
    mean nothing there), or an engine that cannot take embeddings."""
    inner = provider.get()
    if soft.model != inner.name:
        raise ConflictError(
            f"prompt {source.id!r} is a soft prompt trained for model {soft.model!r}; this "
            f"server runs model {inner.name!r}. A soft prompt only works with the model it was "
            f"trained on: serve it with DPSYN_MODEL={soft.model}",
            code="model_mismatch",
            prompt_model=soft.model,
            server_model=inner.name,
        )
    from app.promptdpsgd.backend import (  # torch: only when a soft prompt is served
        GradientAccessError,
        SoftPromptedBackend,
        SoftPromptMismatchError,
    )
    from app.promptdpsgd.vllm import NoEmbeddingTableError, vllm_soft_prompted

    try:
        if isinstance(inner, VLLMHttpBackend):
            return vllm_soft_prompted(inner, soft, provider.embeddings_dir)
        return SoftPromptedBackend(inner, soft)
    except SoftPromptMismatchError as err:  # same name, another hidden size
        raise ConflictError(
            f"prompt {source.id!r}: {err}",
            code="model_mismatch",
            prompt_model=soft.model,
            server_model=inner.name,
        ) from None
    except NoEmbeddingTableError as err:
        raise ConflictError(
            f"prompt {source.id!r} is a soft prompt (promptdpsgd), sent to vLLM as prompt "
            f"embeddings, which needs the served model's input embeddings: {err}",
            code="backend_unsupported",
        ) from None
    except GradientAccessError:
        raise ConflictError(
            f"prompt {source.id!r} is a soft prompt (promptdpsgd), which needs the local "
            f"transformers backend or vLLM; this server's backend ({type(inner).__name__}) "
            "cannot take input embeddings",
            code="backend_unsupported",
        ) from None


def complete(
    source: PromptSource, query: str, provider: BackendProvider, *, calibrated: bool = False
) -> Completion:
    """Answer ``query`` with a prompt (no database access: call it holding no transaction).

    A soft prompt is put in front of the prompt text by :class:`SoftPromptedBackend` and
    the same scorer runs on top; its forward passes take the provider's lock like any other
    (the retry layer holds it), as they use the same model. ``calibrated`` (classification):
    see :func:`classify`."""
    task = source.task
    if calibrated and task.kind != TaskKind.CLASSIFICATION:
        raise InvalidError("calibrated: contextual calibration applies to classification prompts")
    backend = scoring_backend(source, provider, COMPLETE_RETRY, context="/complete")
    if task.kind == TaskKind.CLASSIFICATION:
        scores = classify(source, backend, query, calibrated=calibrated)
        return Completion(
            task.kind,
            label=max(scores, key=scores.__getitem__),
            scores=scores,
            calibration="contextual" if calibrated else "none",
        )
    [value] = extract_values(backend, task, source.prompt, [query])
    return Completion(task.kind, value=value)


def classify(
    source: PromptSource, backend: LLMBackend, query: str, *, calibrated: bool
) -> dict[str, float]:
    """A classification prompt's scores of ``query``, by label: the one decision of
    ``/complete`` and of the OpenAI-compatible routes' label answers (the label is the first
    of the highest). ``calibrated``: divided by the prompt's content-free scores and
    renormalised (contextual calibration, Zhao et al. 2021; :func:`content_free_scores`)."""
    try:
        scores = label_scores(backend, source.task, source.prompt, query)
        if calibrated:
            scores = _calibrated(scores, content_free_scores(source, backend))
    except ScoringError as err:
        raise InvalidError(str(err)) from None
    return scores


#: The content-free label distributions of prompts, by (prompt ID, model): a function of the
#: prompt (a DP output) and fixed public inputs, so public; computed once per process.
_CONTENT_FREE: LruCache[tuple[str, str], np.ndarray] = LruCache(max_entries=4096)


def content_free_scores(source: PromptSource, backend: LLMBackend) -> np.ndarray:
    """The prompt's label distributions for the content-free inputs ``"N/A"``, ``""`` and
    ``"[MASK]"`` (:data:`app.eval.icl.CONTENT_FREE`), remembered: the first calibrated answer
    of a prompt on this process costs one more forward pass of three inputs."""
    key = (source.id, backend.name)
    cached = _CONTENT_FREE.get(key)
    if cached is None:
        cached = label_probabilities(backend, source.task, source.prompt, list(CONTENT_FREE))
        _CONTENT_FREE.put(key, cached)
    return cached


def _calibrated(scores: dict[str, float], content_free: np.ndarray) -> dict[str, float]:
    labels = list(scores)
    row = contextual_calibration(np.array([[scores[label] for label in labels]]), content_free)
    return {label: float(p) for label, p in zip(labels, row[0], strict=True)}


# --- validation: scoring a stored prompt on public labelled records -------------------------

#: Most validation records a prompt is scored on (public configuration): enough for an
#: accuracy to about +-0.07 (two standard errors at 0.5), a few seconds of a CPU model.
VALIDATION_MAX_RECORDS = 200


class ValidationUnavailableError(ValueError):
    """The validation set cannot be read (deleted, or not public and labelled); the message
    names no record."""


class ValidationStatus:
    PENDING = "pending"  # the prompt is stored; the worker has not scored it yet
    SCORED = "scored"
    NOT_SCORED = "not_scored"  # with a reason (never a record)


def pending_validation(dataset_id: str) -> dict[str, Any]:
    """What a prompt set holds from when it is stored until it is scored."""
    return {"dataset_id": dataset_id, "status": ValidationStatus.PENDING}


def validation_is_final(validation: dict[str, Any] | None) -> bool:
    """Whether a prompt set's validation will not change again (none asked, or done)."""
    return validation is None or validation.get("status") != ValidationStatus.PENDING


def validation_sample(
    records: Sequence[Record], limit: int = VALIDATION_MAX_RECORDS
) -> list[Record]:
    """Up to ``limit`` records, evenly spaced in upload order: deterministic (the same
    dataset always gives the same sample) and spread over the whole file, so a file sorted
    by label still gives every label its share."""
    n = len(records)
    if n <= limit:
        return list(records)
    return [records[i * n // limit] for i in range(limit)]


def load_validation_records(
    session: Session, dataset_id: str, reader: Reader, limit: int = VALIDATION_MAX_RECORDS
) -> list[Record]:
    """The sample a prompt is scored on. Refuses anything but a live public labelled
    dataset (:class:`ValidationUnavailableError`, naming no record): admission checked it,
    and checking again here means no private record ever reaches the scorer, even from an
    edited job row. The read is recorded as ``reader``'s (``app.services.record_reads``)."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or dataset.deleted_at is not None:
        raise ValidationUnavailableError("the validation dataset was deleted")
    if dataset.kind != DatasetKind.PUBLIC or not dataset.label_counts:
        raise ValidationUnavailableError("the validation dataset is not a public labelled dataset")
    return validation_sample(load_records(session, dataset.id, reader), limit)


def scoring_backend(
    source: PromptSource, provider: BackendProvider, retry: RetryPolicy, *, context: str
) -> LLMBackend:
    """The backend ``source`` answers on (``/complete`` and validation alike): the provider's
    model, with the soft prompt in front for a PromptDPSGD prompt; through the one retry
    layer, whose log lines name ``context``."""
    model = (
        provider.get()
        if source.soft_prompt is None
        else soft_prompted(source, source.soft_prompt, provider)
    )
    share = provider.use_lock.share(context)  # each answer its own account of engine time
    return RetryingBackend(model, retry=retry, lock=share, context=context)


def score_prompt(
    source: PromptSource,
    records: Sequence[Record],
    provider: BackendProvider,
    retry: RetryPolicy = COMPLETE_RETRY,
) -> dict[str, Any]:
    """``n`` and ``accuracy`` of the prompt on ``records`` (public), by the one scorer, and
    for classification ``calibrated_accuracy`` (contextual calibration, as ``/complete``
    answers with ``calibrated``, so that a team chooses with both numbers)."""
    backend = scoring_backend(source, provider, retry, context="validation")
    score = evaluate(backend, source.task, source.prompt, records, calibrated=True)
    out: dict[str, Any] = {"n": score.n, "accuracy": score.accuracy}
    if score.calibrated_accuracy is not None:
        out["calibrated_accuracy"] = score.calibrated_accuracy
    return {**out, "baselines": baselines(source.task, records, provider, retry)}


def baselines(
    task: TaskSpec, records: Sequence[Record], provider: BackendProvider, retry: RetryPolicy
) -> dict[str, Any]:
    """What a prompt must beat, on the same public records: zero-shot (the
    instruction and the query, no demonstrations, on the plain model: no soft prompt) and,
    for classification, always answering the records' most frequent label. Public inputs
    only, so no privacy cost."""
    plain = RetryingBackend(
        provider.get(), retry=retry, lock=provider.use_lock, context="validation"
    )
    zero = evaluate(plain, task, demonstration_prompt(task, []), records, calibrated=True)
    out: dict[str, Any] = {"zero_shot": zero.accuracy}
    if zero.calibrated_accuracy is not None:
        out["zero_shot_calibrated"] = zero.calibrated_accuracy
    if task.kind == TaskKind.CLASSIFICATION and records:
        counts = Counter(r.label for r in records)
        label, hits = max(counts.items(), key=lambda item: (item[1], item[0]))
        out.update(majority=hits / len(records), majority_label=label)
    return out


def record_validation(session: Session, prompt_id: str, outcome: dict[str, Any]) -> bool:
    """Write a pending validation's outcome (``n`` and ``accuracy``, or ``reason``) to the
    prompt set; False (nothing written) if it is not pending. Flushes; the caller commits."""
    row = session.get(PromptSet, prompt_id, with_for_update=True)
    if row is None or validation_is_final(row.validation):
        return False
    assert row.validation is not None
    status = ValidationStatus.NOT_SCORED if "reason" in outcome else ValidationStatus.SCORED
    row.validation = {"dataset_id": row.validation["dataset_id"], "status": status, **outcome}
    session.flush()
    return True
