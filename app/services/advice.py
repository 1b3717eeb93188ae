"""Advice runs of the service: ``dpsyn advise`` against a public labelled dataset (issue 33).

An advice run reads only a **public** labelled dataset (uploaded with ``public=true`` and
labels), so it is never charged and writes no ledger entry: the data are public and the
outputs are accuracies on them. It runs in the API process, one at a time, on the backend
provider that ``/complete`` uses (an in-process worker shares it; a vLLM deployment sends its
calls to the engine), under the provider's lock, so it takes turns with jobs instead of
racing them for the model. A run the server did not finish (a restart) is marked failed at
the next start; it can simply be started again.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from pydantic import ValidationError
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import AdviceRun, AdviceStatus, Dataset, DatasetKind, now
from app.eval.advice import AdviceConfig, advise, check
from app.llm.provider import BackendProvider
from app.llm.retry import RetryingBackend
from app.services.datasets import get_live_dataset, load_records
from app.services.errors import ConflictError, InvalidError, NotFoundError
from app.services.prompts import COMPLETE_RETRY
from app.synthesis.tasks import TaskSpec

MIN_RECORDS = 40  # a stand-in and held-out queries worth measuring
INTERRUPTED = "the server stopped before this advice run ended; start it again"


def public_labelled(session: Session, tenant_id: str, dataset_id: str) -> tuple[Dataset, TaskSpec]:
    """The tenant's live public labelled dataset and its task, or a 4xx naming the problem."""
    dataset = get_live_dataset(session, tenant_id, dataset_id)
    if dataset.kind != DatasetKind.PUBLIC:
        raise ConflictError(
            f"dataset {dataset_id!r} is private: advice runs on a public labelled dataset "
            "(upload one with public=true and labelled=true), so that it spends nothing",
            code="dataset_not_public",
        )
    if not dataset.label_counts or not dataset.task:
        raise ConflictError(
            f"dataset {dataset_id!r} has no labels: advice needs a public labelled dataset "
            "(public=true, labelled=true, with its task)",
            code="dataset_unlabelled",
        )
    if dataset.record_count < MIN_RECORDS:
        raise InvalidError(
            f"dataset {dataset_id!r} has {dataset.record_count} records; advice needs at "
            f"least {MIN_RECORDS}",
            code="dataset_too_small",
        )
    return dataset, TaskSpec.model_validate(dataset.task)


def create(session: Session, tenant_id: str, dataset_id: str, config: AdviceConfig) -> AdviceRun:
    """A queued advice run, after every check that can fail before a model is touched."""
    _dataset, task = public_labelled(session, tenant_id, dataset_id)
    try:
        check(task, config)
    except (ValueError, ValidationError) as err:
        raise InvalidError(f"advice: {err}", code="advice_invalid") from None
    row = AdviceRun(
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        config=config.model_dump(mode="json"),
        status=AdviceStatus.QUEUED.value,
        progress_done=0,
        progress_total=0,
    )
    session.add(row)
    session.flush()
    return row


def get(session: Session, tenant_id: str, advice_id: str) -> AdviceRun:
    row = session.get(AdviceRun, advice_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFoundError(f"advice run {advice_id!r} not found")
    return row


def list_runs(session: Session, tenant_id: str, limit: int = 50) -> list[AdviceRun]:
    query = (
        select(AdviceRun)
        .where(AdviceRun.tenant_id == tenant_id)
        .order_by(AdviceRun.created_at.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def fail_interrupted(session: Session) -> int:
    """Mark the runs a stopped server left queued or running as failed (at start). A
    schema without the table (an API told not to migrate, before ``dpsyn migrate``) has none."""
    if not inspect(session.get_bind()).has_table(AdviceRun.__tablename__):
        return 0
    rows = session.scalars(
        select(AdviceRun).where(
            AdviceRun.status.in_([AdviceStatus.QUEUED.value, AdviceStatus.RUNNING.value])
        )
    ).all()
    for row in rows:
        row.status, row.error, row.finished_at = AdviceStatus.FAILED.value, INTERRUPTED, now()
    return len(rows)


def _update(sessions: sessionmaker[Session], advice_id: str, **values: Any) -> None:
    with sessions() as session:
        row = session.get(AdviceRun, advice_id)
        if row is not None:
            for name, value in values.items():
                setattr(row, name, value)
            session.commit()


def run(sessions: sessionmaker[Session], provider: BackendProvider, advice_id: str) -> None:
    """Run one advice run to its end and store what it measured (or why it failed: never a
    record, only the kind of error)."""
    with sessions() as session:
        row = session.get(AdviceRun, advice_id)
        if row is None or row.status != AdviceStatus.QUEUED.value:
            return
        dataset = session.get(Dataset, row.dataset_id)
        config = AdviceConfig.model_validate(row.config)
        records = load_records(session, row.dataset_id)
        task = TaskSpec.model_validate(dataset.task if dataset is not None else {})
    _update(sessions, advice_id, status=AdviceStatus.RUNNING.value)
    backend = RetryingBackend(
        provider.get(), retry=COMPLETE_RETRY, lock=provider.use_lock, context="advice"
    )
    try:
        result = advise(task, records, backend, config, progress=_progress(sessions, advice_id))
    except Exception as err:  # stored for the user; the message never carries a record
        _update(
            sessions,
            advice_id,
            status=AdviceStatus.FAILED.value,
            error=f"the advice run failed ({type(err).__name__})",
            finished_at=now(),
        )
        return
    _update(
        sessions,
        advice_id,
        status=AdviceStatus.SUCCEEDED.value,
        result=result.to_dict(),
        finished_at=now(),
    )


def _progress(sessions: sessionmaker[Session], advice_id: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        _update(sessions, advice_id, progress_done=done, progress_total=total)

    return report


class AdviceRunner:
    """Runs advice in the background, one at a time (an executor of one thread)."""

    def __init__(
        self, sessions: sessionmaker[Session], provider: BackendProvider, executor: Executor
    ) -> None:
        self.sessions, self.provider, self.executor = sessions, provider, executor

    def submit(self, advice_id: str) -> None:
        """Start ``advice_id`` once the runs before it end (call after its row is committed)."""
        self.executor.submit(run, self.sessions, self.provider, advice_id)
