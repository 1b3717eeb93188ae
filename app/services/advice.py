"""Advice runs of the service: ``dpsyn advise`` against a public labelled dataset.

An advice run reads only a **public** labelled dataset (uploaded with ``public=true`` and
labels), so it is never charged and writes no ledger entry: the data are public and the
outputs are accuracies on them.

Runs are a queue in the database, shared by every process (each lived in the memory
of the API process that accepted it, without a cap, and a second replica starting failed them
all). An :class:`AdviceRunner` (one thread, in each process that serves the model: the API's
when embedded, each worker's when distributed) claims the next queued run with a conditional
update, so that one runner has it, and holds it under a lease it renews while it runs. Every
write of a running run is conditional on that runner still owning it: a run cancelled, or
lost and failed, is never written over. A run is failed once its lease has run out (its
runner died); a runner that stops hands its run back to the queue. Runners take the queued
runs in the order of each tenant's place in its own queue (``position``), then of age, so every
tenant's first run goes before any tenant's second; a tenant may have at most
``advice_per_tenant`` runs queued or running (429 ``advice_busy`` past it). A run takes turns
with jobs for the model (the provider's lock).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, inspect, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import AdviceRun, AdviceStatus, Dataset, DatasetKind, now
from app.eval.advice import AdviceConfig, advise, check
from app.llm.provider import BackendProvider
from app.llm.retry import RetryingBackend
from app.services.datasets import get_live_dataset, load_records
from app.services.errors import ConflictError, InvalidError, NotFoundError, TooManyError
from app.services.prompts import COMPLETE_RETRY
from app.services.record_reads import Reader, ReaderKind
from app.synthesis.data import Record
from app.synthesis.tasks import TaskSpec

log = logging.getLogger(__name__)

MIN_RECORDS = 40  # a stand-in and held-out queries worth measuring
INTERRUPTED = "the server stopped before this advice run ended; start it again"
CANCELLED = "cancelled on request"
LEASE_S = 60.0  # a running run's lease; renewed every third of it
POLL_S = 1.0  # how often an idle runner looks for queued runs (a submission wakes it at once)
BUSY_RETRY_AFTER_S = 30
ACTIVE = (AdviceStatus.QUEUED.value, AdviceStatus.RUNNING.value)


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


def create(
    session: Session, tenant_id: str, dataset_id: str, config: AdviceConfig, *, cap: int
) -> AdviceRun:
    """A queued advice run, after every check that can fail before a model is touched; 429
    ``advice_busy`` if the tenant already has ``cap`` runs queued or running."""
    _dataset, task = public_labelled(session, tenant_id, dataset_id)
    try:
        check(task, config)
    except (ValueError, ValidationError) as err:
        raise InvalidError(f"advice: {err}", code="advice_invalid") from None
    active = session.scalar(
        select(func.count())
        .select_from(AdviceRun)
        .where(AdviceRun.tenant_id == tenant_id, AdviceRun.status.in_(ACTIVE))
    )
    if active is not None and active >= cap:
        raise TooManyError(
            f"this tenant already has {active} advice runs queued or running, its share "
            f"(DPSYN_ADVICE_PER_TENANT={cap}); wait for one to end, or cancel one "
            "(POST /v1/advice/{id}/cancel)",
            code="advice_busy",
            retry_after_s=BUSY_RETRY_AFTER_S,
        )
    row = AdviceRun(
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        config=config.model_dump(mode="json"),
        status=AdviceStatus.QUEUED.value,
        progress_done=0,
        progress_total=0,
        position=active or 0,
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


def cancel(session: Session, tenant_id: str, advice_id: str) -> AdviceRun:
    """Cancel a run: a queued one at once, a running one when its runner next reports
    progress (``cancel_requested``); a cancelled one stays so; a finished one is a 409.
    Flushes; the caller commits."""
    row = get(session, tenant_id, advice_id)
    if row.status == AdviceStatus.CANCELLED:
        return row
    if row.status not in ACTIVE:
        raise ConflictError(
            f"advice run {advice_id!r} already {row.status}", code="advice_finished"
        )
    if row.status == AdviceStatus.QUEUED:
        taken = session.execute(
            update(AdviceRun)
            .where(AdviceRun.id == advice_id, AdviceRun.status == AdviceStatus.QUEUED.value)
            .values(status=AdviceStatus.CANCELLED.value, error=CANCELLED, finished_at=now())
        )
        if getattr(taken, "rowcount", 0) == 1:
            session.refresh(row)
            return row
    row.cancel_requested = True  # it started meanwhile: its runner stops it
    session.flush()
    return row


def fail_interrupted(session: Session, at: datetime | None = None) -> int:
    """Fail, once, the running runs whose lease ran out by ``at`` (their runner died) and
    those a server older than leases left running (no lease). Queued runs stay queued: any
    runner takes them. A schema without the table (an API told not to migrate, before
    ``dpsyn migrate``) has none."""
    if not inspect(session.get_bind()).has_table(AdviceRun.__tablename__):
        return 0
    at = at or now()
    failed = session.execute(
        update(AdviceRun)
        .where(
            AdviceRun.status == AdviceStatus.RUNNING.value,
            or_(AdviceRun.lease_expires_at.is_(None), AdviceRun.lease_expires_at < at),
        )
        .values(status=AdviceStatus.FAILED.value, error=INTERRUPTED, finished_at=at)
    )
    return int(getattr(failed, "rowcount", 0) or 0)


def claim_next(session: Session, owner: str, lease_s: float = LEASE_S) -> str | None:
    """Claim the next queued run for ``owner`` (every tenant's first before any tenant's
    second, then the oldest), or None; commits. Conditional: of two runners asking at once,
    one gets a run."""
    candidates = session.scalars(
        select(AdviceRun.id)
        .where(AdviceRun.status == AdviceStatus.QUEUED.value)
        .order_by(AdviceRun.position, AdviceRun.created_at, AdviceRun.id)
        .limit(8)
    ).all()
    for advice_id in candidates:
        claimed = session.execute(
            update(AdviceRun)
            .where(AdviceRun.id == advice_id, AdviceRun.status == AdviceStatus.QUEUED.value)
            .values(
                status=AdviceStatus.RUNNING.value,
                owner=owner,
                lease_expires_at=now() + timedelta(seconds=lease_s),
                estimate=None,  # a requeued run's last line is not this attempt's
            )
        )
        session.commit()
        if getattr(claimed, "rowcount", 0) == 1:
            return advice_id
    return None


class LostRunError(Exception):
    """The runner no longer owns the run (cancelled, failed as lost, or handed back)."""


def _owned_write(
    sessions: sessionmaker[Session], advice_id: str, runner: str, **values: Any
) -> bool:
    """Write ``values`` to the run if ``runner`` still runs it; whether it did."""
    with sessions() as session:
        written = session.execute(
            update(AdviceRun)
            .where(
                AdviceRun.id == advice_id,
                AdviceRun.owner == runner,
                AdviceRun.status == AdviceStatus.RUNNING.value,
            )
            .values(**values)
        )
        session.commit()
        return getattr(written, "rowcount", 0) == 1


def _end(
    sessions: sessionmaker[Session], advice_id: str, owner: str, status: AdviceStatus, error: str
) -> bool:
    """End the run with ``status`` and ``error`` (a message naming no record), if still
    ``owner``'s."""
    return _owned_write(
        sessions, advice_id, owner, status=status.value, error=error, finished_at=now()
    )


def renew(sessions: sessionmaker[Session], advice_id: str, owner: str, lease_s: float) -> None:
    """Extend the lease, or :class:`LostRunError`; a cancellation asked meanwhile ends it."""
    with sessions() as session:
        asked = session.scalar(select(AdviceRun.cancel_requested).where(AdviceRun.id == advice_id))
    if asked:
        _end(sessions, advice_id, owner, AdviceStatus.CANCELLED, CANCELLED)
        raise LostRunError
    until = now() + timedelta(seconds=lease_s)
    if not _owned_write(sessions, advice_id, owner, lease_expires_at=until):
        raise LostRunError


def run(
    sessions: sessionmaker[Session],
    provider: BackendProvider,
    advice_id: str,
    owner: str,
    lease_s: float = LEASE_S,
) -> None:
    """Run one claimed advice run to its end and store what it measured (or why it failed:
    never a record, only the kind of error), while ``owner`` still owns it."""
    try:
        read = _read(sessions, advice_id, owner)
    except Exception as err:  # e.g. its read could not be recorded: nothing was opened
        error = f"the advice run could not read its dataset ({type(err).__name__})"
        _end(sessions, advice_id, owner, AdviceStatus.FAILED, error)
        return
    if read is None:
        return
    task, config, records = read
    backend = RetryingBackend(
        provider.get(), retry=COMPLETE_RETRY, lock=provider.use_lock, context="advice"
    )

    def report(done: int, total: int) -> None:
        renew(sessions, advice_id, owner, lease_s)
        _owned_write(sessions, advice_id, owner, progress_done=done, progress_total=total)

    def estimate(line: str | None) -> None:  # public timings of runs on public records
        _owned_write(sessions, advice_id, owner, estimate=line)

    try:
        result = advise(task, records, backend, config, progress=report, estimate=estimate)
    except LostRunError:
        log.info("advice %s: cancelled or no longer this runner's; stopped", advice_id)
        return
    except Exception as err:  # stored for the user; the message never carries a record
        _end(
            sessions,
            advice_id,
            owner,
            AdviceStatus.FAILED,
            f"the advice run failed ({type(err).__name__})",
        )
        return
    _owned_write(
        sessions,
        advice_id,
        owner,
        status=AdviceStatus.SUCCEEDED.value,
        result=result.to_dict(),
        finished_at=now(),
    )


def _read(
    sessions: sessionmaker[Session], advice_id: str, owner: str
) -> tuple[TaskSpec, AdviceConfig, list[Record]] | None:
    """The claimed run's task, config and records (the read recorded first, as the advice
    run's, by this runner); None if the run is no longer ``owner``'s."""
    with sessions() as session:
        row = session.get(AdviceRun, advice_id)
        if row is None or row.owner != owner or row.status != AdviceStatus.RUNNING:
            return None
        dataset = session.get(Dataset, row.dataset_id)
        config = AdviceConfig.model_validate(row.config)
        task = TaskSpec.model_validate(dataset.task if dataset is not None else {})
        reader = Reader.of(ReaderKind.ADVICE, advice_id, owner)
        return task, config, load_records(session, row.dataset_id, reader)


def runner_name() -> str:
    """A name for this process's runner, unique among every process on every host."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class AdviceRunner:
    """One thread that runs the queued advice runs of every process's tenants, one at a
    time, while this process lives (module docstring). :meth:`start` at start-up,
    :meth:`stop` at shutdown; :meth:`submit` wakes it for a run just committed."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        provider: BackendProvider,
        *,
        lease_s: float = LEASE_S,
        poll_s: float = POLL_S,
    ) -> None:
        self.sessions, self.provider = sessions, provider
        self.lease_s, self.poll_s = lease_s, poll_s
        self.owner = runner_name()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.current: str | None = None

    def submit(self, advice_id: str) -> None:
        """A run was queued (its row committed): look now rather than at the next poll."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="advice", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop looking for runs, and hand the run in progress back to the queue (the thread
        it runs in finds it no longer owned at its next report, and stops)."""
        self._stopping.set()
        self._wake.set()
        current = self.current
        if current is not None:
            _owned_write(
                self.sessions,
                current,
                self.owner,
                status=AdviceStatus.QUEUED.value,
                owner=None,
                lease_expires_at=None,
            )

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self._one():
                    self._wake.wait(self.poll_s)
                    self._wake.clear()
            except Exception as err:  # the database is down: try again later
                log.warning("advice runner: %s; retrying", type(err).__name__)
                self._stopping.wait(self.poll_s)

    def _one(self) -> bool:
        """Fail the runs lost with their runner, then run the next queued one; whether one
        ran."""
        with self.sessions() as session:
            if fail_interrupted(session):
                session.commit()
            advice_id = claim_next(session, self.owner, self.lease_s)
        if advice_id is None:
            return False
        self.current = advice_id
        try:
            self._run_renewing(advice_id)
        finally:
            self.current = None
        return True

    def _run_renewing(self, advice_id: str) -> None:
        """Run it in a thread of its own while this one renews its lease (a step of an
        advice run can outlast the lease on a CPU model)."""
        done = threading.Event()

        def work() -> None:
            try:
                run(self.sessions, self.provider, advice_id, self.owner, self.lease_s)
            finally:
                done.set()

        threading.Thread(target=work, name=f"advice-{advice_id}", daemon=True).start()
        while not done.wait(self.lease_s / 3):
            if self._stopping.is_set():
                return
            try:
                renew(self.sessions, advice_id, self.owner, self.lease_s)
            except LostRunError:
                return  # cancelled or handed back: its thread stops at its next report
