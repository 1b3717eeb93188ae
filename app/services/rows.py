"""Reading a tenant's rows, the same way for every kind of row: one row by ID, or a page.

A row of another tenant is answered exactly like a missing one (404, the same message), so
that an ID never tells a client whether some other tenant holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Job
from app.methods.base import Stored

from .errors import NotFoundError

_Row = TypeVar("_Row")


def tenant_row(
    session: Session,
    model: type[_Row],
    tenant_id: str,
    row_id: str,
    what: str,
    *,
    lock: bool = False,
) -> _Row:
    """The row of ``model`` with ``row_id`` owned by ``tenant_id`` (locked for update if
    ``lock``); :class:`NotFoundError` "``what`` 'id' not found" otherwise."""
    table: Any = model  # a mapped class: its ``id`` and ``tenant_id`` are columns
    query = select(table).where(table.id == row_id, table.tenant_id == tenant_id)
    if lock:
        query = query.with_for_update()
    row: _Row | None = session.scalars(query).first()
    if row is None:
        raise NotFoundError(f"{what} {row_id!r} not found")
    return row


def tenant_page(
    session: Session, model: type[_Row], tenant_id: str, *where: Any, limit: int, offset: int
) -> list[_Row]:
    """A page of the rows of ``model`` owned by ``tenant_id`` that match ``where``, newest
    first: every list (datasets, jobs, prompts) pages the same way, ties broken by ID so that
    consecutive pages neither skip nor repeat a row."""
    table: Any = model  # a mapped class: its ``tenant_id``, ``created_at`` and ``id`` are columns
    query = select(table).where(table.tenant_id == tenant_id, *where)
    query = query.order_by(table.created_at.desc(), table.id).limit(limit).offset(offset)
    return list(session.scalars(query))


def stored_plan(job: Job) -> Stored:
    """What admission stored of ``job``'s plan, as the method interface reads it
    (:meth:`Method.rebuild`, :meth:`Method.summary`, :meth:`Method.prompt_notes`)."""
    return Stored(config=job.config or {}, schedule=job.schedule or [], delta=job.delta)


def asked_epsilon(config: Mapping[str, Any]) -> float | None:
    """The ε the job was asked for, as its stored config keeps it: the method's validated
    config is the one part of it holding an ``epsilon`` (``synthesis``, ``pate``,
    ``promptdpsgd``). The job's own ``epsilon`` is another number, the accountant's ε of the
    planned noise, which the ledger charges (2 asked can plan as 1.994). None: not stored."""
    found = [
        part["epsilon"]
        for part in config.values()
        if isinstance(part, Mapping) and isinstance(part.get("epsilon"), int | float)
    ]
    return float(found[0]) if len(found) == 1 else None
