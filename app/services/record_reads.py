"""Who read what: every read of a dataset's records, recorded before the records are opened.

The read functions of :mod:`app.services.datasets` (``load_records``, ``load_public_texts``)
take a :class:`Reader` (what reads: a job, an advice run or a validation, by ID; and the
process, as a job's lease names its worker), so no caller opens records without saying who
it is. The row (dataset, reader, process, how many records, when) is committed before the
records are opened: a read whose row cannot be written fails, and nothing is opened.

The row is written in the reader's own short transaction (its session's, which holds no
row lock then: every reader opens records in a session of its own, before any write), so
the only lock it takes is the insert's own (on PostgreSQL, the key-share lock its foreign
key takes on the dataset row), held for one commit, with no other lock held: nothing in the
one lock order (docs/service.md) can wait on it in reverse. Rows hold IDs, a host:pid and a
count, never a record's text; the dataset's owner reads them (``GET
/v1/datasets/{id}/reads``, the dashboard's dataset page, ``dpsyn datasets reads``).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import RecordRead, now


class ReaderKind(StrEnum):
    """What read the records: a job's worker (its private records, or its public texts), an
    advice run (a public labelled dataset) or a validation (a job's validation set)."""

    JOB = "job"
    ADVICE = "advice"
    VALIDATION = "validation"


def this_process() -> str:
    """This process as the job leases name a worker: host and process ID."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}"


@dataclass(frozen=True)
class Reader:
    """Who reads: ``kind`` and ``id`` (the job's ID for a job and its validation, the advice
    run's for an advice run) and ``process`` (the lease owner of the attempt, host:pid:token,
    where it holds one; else :func:`this_process`)."""

    kind: ReaderKind
    id: str
    process: str

    @classmethod
    def of(cls, kind: ReaderKind, reader_id: str, process: str | None = None) -> Reader:
        return cls(kind, reader_id, process or this_process())


def record_read(session: Session, dataset_id: str, reader: Reader, count: int) -> None:
    """Record that ``reader`` reads ``count`` records of the dataset; commits the session
    (its transaction ends here). Raises if the row cannot be written: the read must fail."""
    session.add(
        RecordRead(
            dataset_id=dataset_id,
            reader_kind=ReaderKind(reader.kind).value,
            reader_id=reader.id[:32],
            process=reader.process[:200],
            record_count=count,
            read_at=now(),
        )
    )
    session.commit()


def list_reads(session: Session, dataset_id: str, *, limit: int, offset: int) -> list[RecordRead]:
    """The dataset's reads, the latest first (the caller checked the dataset is the tenant's)."""
    query = select(RecordRead).where(RecordRead.dataset_id == dataset_id)
    query = query.order_by(RecordRead.read_at.desc(), RecordRead.id.desc())
    return list(session.scalars(query.limit(limit).offset(offset)))
