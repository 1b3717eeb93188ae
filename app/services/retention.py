"""Retention: a private dataset's records are dropped some days after its last job.

With ``DPSYN_RECORD_RETENTION_DAYS`` set to N, a private dataset whose last job (of any
status) ended more than N days ago, and that has no queued or running job, has its records
deleted and its data key destroyed (:func:`app.services.datasets.erase_records`, as deletion
does), so its records are unreadable in every backup too. Kept: the dataset's row (marked
``records_dropped_at``), its budget, its ledger, its count release, its jobs, its prompts
and its records' fingerprints. A new job on it is refused (409 ``records_dropped``). A
dataset that never had a job keeps its records (there is no "last job" to count from), and
public datasets are left alone (their texts are public whole).

Run by every worker's reaper (and the embedded server's) once an hour, and by ``dpsyn admin
records expire``. Each dataset is dropped under the locks of deletion, re-checked there, in a
transaction of its own.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import ACTIVE_STATUSES, Dataset, DatasetKind, Job, now

from .datasets import drop_idle_records


def due(session: Session, ended_before: datetime) -> list[str]:
    """Private datasets with records whose last job ended before ``ended_before`` and that
    have no active job (checked again under the locks before each is dropped)."""
    last = (
        select(Job.dataset_id, func.max(Job.finished_at).label("last"))
        .group_by(Job.dataset_id)
        .subquery()
    )
    active = select(Job.dataset_id).where(Job.status.in_(sorted(s.value for s in ACTIVE_STATUSES)))
    query = (
        select(Dataset.id)
        .join(last, last.c.dataset_id == Dataset.id)
        .where(
            Dataset.kind == DatasetKind.PRIVATE.value,
            Dataset.deleted_at.is_(None),
            Dataset.records_dropped_at.is_(None),
            last.c.last < ended_before,
            Dataset.id.not_in(active),
        )
        .order_by(Dataset.id)
    )
    return list(session.scalars(query))


def expire_records(session: Session, days: float, *, at: datetime | None = None) -> list[str]:
    """Drop the records of every dataset past the retention period at ``at`` (default: now);
    returns their IDs. Each is its own transaction (committed or rolled back here)."""
    at = at or now()
    ended_before = at - timedelta(days=days)
    candidates = due(session, ended_before)
    session.rollback()
    return [d for d in candidates if drop_idle_records(session, d, ended_before, at)]
