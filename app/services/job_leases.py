"""A running job's lease and a queued job's outbox mark, shared by the API and the workers.

A running job's attempt holds a *lease* (owner and expiry) that its worker's heartbeat renews
(:func:`renew_lease`). A lease that expired means no live worker is running the job (it was
killed, or lost the database for longer than the lease): :func:`reap_job` (called by every
worker's reaper) and ``app.services.jobs.cancel_job`` end such a job at once instead of
waiting for a worker that is gone, by the one rule of
:func:`app.services.job_end.close_job`: charged if it read the data, else released.

A queued job's row carries an outbox mark (``dispatched_at``, committed with it): a job whose
task was lost on its way (the API killed before sending it, Redis emptied) is sent again by
a dispatcher once the mark is older than a bound (:func:`redispatch_due`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.db.models import (
    Job,
    JobStatus,
)

from .job_end import (
    close_job,
    lease_expired,
)


def lease_error(job: Job) -> str:
    """The client-facing error of a job ended because its lease expired (no record text)."""
    charge = (
        "it had read the private data, so it stays charged"
        if job.touched_data
        else "it had not read any private record, so its reservation was released"
    )
    return (
        "lease expired: the worker running this job stopped renewing it (the worker died or "
        f"lost the database); {charge}"
    )


def renew_lease(session: Session, job_id: str, owner: str, until: datetime) -> bool:
    """Extend ``owner``'s lease on a running job to ``until``; False if the job is no longer
    running under that lease (finished, reaped, or taken over by another attempt). One
    UPDATE by primary key: the heartbeat is cheap."""
    result = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.lease_owner == owner,
            Job.status == JobStatus.RUNNING.value,
        )
        .values(lease_expires_at=until)
        .execution_options(synchronize_session=False)
    )
    # SQLAlchemy types execute() as Result; an UPDATE's is a CursorResult, with rowcount.
    return result.rowcount == 1  # type: ignore[attr-defined]


def expired_job_ids(
    session: Session, at: datetime, *, exclude_owners: Collection[str] = (), limit: int = 100
) -> list[str]:
    """Running jobs whose lease expired by ``at``, oldest first; ``exclude_owners`` are the
    leases of attempts the caller is running itself (they renew as soon as they can)."""
    query = select(Job.id).where(
        Job.status == JobStatus.RUNNING.value,
        Job.lease_expires_at.is_not(None),
        Job.lease_expires_at <= at,
    )
    if exclude_owners:
        query = query.where(
            or_(Job.lease_owner.is_(None), Job.lease_owner.not_in(list(exclude_owners)))
        )
    return list(session.scalars(query.order_by(Job.lease_expires_at).limit(limit)))


def reap_job(session: Session, job_id: str, at: datetime) -> Job | None:
    """End a running job whose lease expired by ``at``: failed (cancelled if a cancellation
    was requested), charged if it read the data, else released. Returns None if it is no
    longer due: renewed, finished or taken over since it was listed, or locked by another
    reaper (skipped, it will be done there). Flushes; the caller commits."""
    job = session.scalars(
        select(Job)
        .where(Job.id == job_id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    ).one_or_none()
    if job is None or not lease_expired(job, at):
        return None
    status = JobStatus.CANCELLED if job.cancel_requested else JobStatus.FAILED
    close_job(session, job, status=status, error=lease_error(job))
    return job


def lease_live(job: Job, at: datetime) -> bool:
    """Whether ``job`` is running under a lease still valid at ``at``: a live attempt runs
    it (its heartbeat renews the lease), so another delivery of its task must leave it be."""
    return (
        job.status == JobStatus.RUNNING
        and job.lease_expires_at is not None
        and not lease_expired(job, at)
    )


# --- the outbox: sending queued jobs again, shared with the workers -------------------------


def redispatch_due(
    session: Session,
    at: datetime,
    *,
    after_s: float,
    exclude: Collection[str] = (),
    limit: int = 100,
) -> list[str]:
    """Queued jobs whose task was last sent more than ``after_s`` before ``at`` (or never),
    oldest first, with their mark moved to ``at``; the caller commits, then sends them.

    The rows are locked with ``SKIP LOCKED`` (PostgreSQL): a row another dispatcher is
    marking, or a worker is claiming, is left to it, so dispatchers never wait on each other
    and each stale job is sent once per bound. (SQLite serialises writers at BEGIN instead.)
    ``exclude`` are jobs the caller holds in its own queue already (the embedded worker).
    Committing the mark before sending means a dispatcher that dies in between costs one
    more bound, never a job."""
    cutoff = at - timedelta(seconds=after_s)
    query = (
        select(Job.id)
        .where(
            Job.status == JobStatus.QUEUED.value,
            or_(Job.dispatched_at.is_(None), Job.dispatched_at <= cutoff),
        )
        .order_by(Job.dispatched_at.nulls_first(), Job.created_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if exclude:
        query = query.where(Job.id.not_in(list(exclude)))
    due = list(session.scalars(query))
    if due:
        session.execute(
            update(Job)
            .where(Job.id.in_(due))
            .values(dispatched_at=at)
            .execution_options(synchronize_session=False)
        )
    return due
