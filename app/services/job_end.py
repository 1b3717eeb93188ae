"""How a job ends without a result, and what that does to its charge: the one rule.

A job that read the private data (``job.touched_data``) stays charged; one that never did has
its reservation released. :mod:`app.services.jobs` (cancel, reap) and
:mod:`app.services.datasets` (deleting a dataset cancels its jobs) both end jobs, so the rule
lives here, below both: ``datasets`` then needs nothing of ``jobs``, which imports it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.db.models import Job, JobStatus, now
from app.ledger import ledger


def close_job(session: Session, job: Job, *, status: JobStatus, error: str | None = None) -> None:
    """End a job that produced no result (failed or cancelled).

    Its charge becomes final if it touched the data (``job.touched_data``), else its
    reservation is released. ``error`` is shown to clients: it must not contain record text.
    Flushes; the caller commits.
    """
    status = JobStatus(status)
    if status not in (JobStatus.FAILED, JobStatus.CANCELLED):
        raise ValueError(f"close_job ends a job as failed or cancelled, not {status}")
    job.status = status.value
    job.error = error
    job.finished_at = now()
    if job.touched_data:
        ledger.commit(session, job.id, reason=charged_reason(status))
    else:
        ledger.release(session, job.id, reason=released_reason(status))
    session.flush()


def released_reason(status: JobStatus) -> str:
    """Why a job that ended without reading a record costs nothing (the release entry's
    reason, shown to clients as the job's ``charge_note``)."""
    return (
        f"released: the job was {JobStatus(status).value} before it read any private record "
        "(the worker records that mark before its first read), so nothing it released "
        "depends on the data"
    )


def charged_reason(status: JobStatus) -> str:
    """Why a job that read the data and ended without a result stays charged."""
    what = "was cancelled" if status == JobStatus.CANCELLED else "failed"
    return (
        f"charged: the job had read the private data when it {what}; how far it got, when "
        "it stopped and whether it failed may depend on the records, so the charge stands "
        "(docs/privacy.md)"
    )


#: The commit entry's reason of a job whose result was stored.
SUCCEEDED_REASON = "charged: the job's result, a differentially private output, was stored"


def lease_expired(job: Job, at: datetime) -> bool:
    """Whether ``job`` is running under a lease that ran out by ``at``.

    A running job without a lease was claimed by code older than leases; migration 0003 gives
    those an expired one, so None only occurs for rows written by hand (tests).
    """
    expiry = job.lease_expires_at
    if job.status != JobStatus.RUNNING or expiry is None:
        return False
    if expiry.tzinfo is None:  # SQLite keeps no zone; every timestamp here is UTC
        expiry = expiry.replace(tzinfo=UTC)
    return expiry <= at
