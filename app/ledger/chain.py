"""The ledger's hash chains: every entry is chained to the previous entry of its dataset.

Each ledger row carries ``chain_seq`` (its position in its dataset's chain: 1, 2, ...) and
``chain_hash``, the SHA-256 of a canonical text of its content and of the previous entry's
hash (:func:`entry_hash`), computed by :func:`append` in the transaction that inserts it.
:func:`append` is the one way a ledger row is written. A hand edit of a row (its epsilon, its
kind, its job), a deleted, inserted or reordered row then breaks the chain, which
:func:`verify` (``dpsyn admin ledger verify``) reports, naming the first broken entry of each
dataset. A chain rewritten whole (every hash recomputed: SHA-256 has no secret) is caught by
the heads exported outside the database (:mod:`app.ledger.heads`), as a Certificate
Transparency log is by its published tree heads.

One chain per dataset (the ``dataset_id`` of the row, also for a dataset charging another's
budget), not one for the whole ledger: a row is inserted under its dataset's row lock
(:func:`app.ledger.ledger.lock_budget`, which every insert path takes first), so reading the
previous entry and inserting the next is serialised per dataset only, and datasets never wait
for each other. The unique index on (``dataset_id``, ``chain_seq``) makes a fork impossible
even for a writer that skipped the lock: its insert fails instead.

The canonical text hashed (version ``dpsyn-ledger-v1``) is :mod:`app.db.ledger_hash`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.ledger_hash import GENESIS as GENESIS
from app.db.ledger_hash import VERSION as VERSION
from app.db.ledger_hash import Content as Content
from app.db.ledger_hash import Origin as Origin
from app.db.ledger_hash import canonical_event as canonical_event
from app.db.ledger_hash import entry_hash as entry_hash
from app.db.ledger_hash import timestamp as timestamp
from app.db.models import Dataset, LedgerEntry, now


def chain_head(session: Session, dataset_id: str) -> tuple[int, str]:
    """The last position and hash of the dataset's chain ((0, GENESIS) when empty)."""
    row = session.execute(
        select(LedgerEntry.chain_seq, LedgerEntry.chain_hash)
        .where(LedgerEntry.dataset_id == dataset_id, LedgerEntry.chain_seq.is_not(None))
        .order_by(LedgerEntry.chain_seq.desc())
        .limit(1)
    ).first()
    if row is None or row[1] is None:
        return 0, GENESIS
    return int(row[0] or 0), str(row[1])


def append(session: Session, entry: LedgerEntry, *, origin: str | None = None) -> LedgerEntry:
    """Chain ``entry`` to its dataset's last entry and add it to the session: the one way a
    ledger row is written. The caller holds the dataset's row lock (``lock_budget``); it is
    taken again here (free when held), so the chain's read-then-insert stays serialised.
    Reading the head flushes the session's pending entries first (a batch admits several
    jobs of one dataset in one transaction)."""
    session.execute(select(Dataset.id).where(Dataset.id == entry.dataset_id).with_for_update())
    seq, previous = chain_head(session, entry.dataset_id)
    if entry.created_at is None:
        entry.created_at = now()
    entry.chain_seq = seq + 1
    entry.chain_origin = origin
    entry.chain_hash = entry_hash(Content.of(entry), previous)
    session.add(entry)
    from app.ledger import heads  # the export after commit (imports this module)

    heads.exported_after_commit(session, entry, previous)
    return entry


@dataclass(frozen=True)
class Break:
    """The first broken entry of a dataset's chain: the row's ID (None when the break is a
    missing row past the end), its position and why."""

    dataset_id: str
    entry_id: int | None
    seq: int | None
    why: str

    def __str__(self) -> str:
        where = f"ledger entry {self.entry_id}" if self.entry_id is not None else "the chain"
        at = f" (position {self.seq})" if self.seq is not None else ""
        return f"dataset {self.dataset_id}: {where}{at}: {self.why}"


def _rows(session: Session) -> Iterator[LedgerEntry]:
    yield from session.scalars(
        select(LedgerEntry)
        .where(LedgerEntry.chain_seq.is_not(None))
        .order_by(LedgerEntry.dataset_id, LedgerEntry.chain_seq)
        .execution_options(yield_per=500)
    )


def _unchained(session: Session) -> dict[str, Break]:
    """Rows without a chain (inserted by hand): the first of each dataset."""
    found: dict[str, Break] = {}
    rows = session.execute(
        select(LedgerEntry.id, LedgerEntry.dataset_id)
        .where((LedgerEntry.chain_seq.is_(None)) | (LedgerEntry.chain_hash.is_(None)))
        .order_by(LedgerEntry.id)
    )
    for entry_id, dataset_id in rows:
        found.setdefault(
            dataset_id, Break(dataset_id, entry_id, None, "not chained (inserted by hand?)")
        )
    return found


def _check(entry: LedgerEntry, seq: int, previous: str, last_id: int) -> str | None:
    """Why ``entry`` does not follow (``seq``, ``previous``, ``last_id``) in its chain."""
    if entry.chain_seq != seq + 1:
        return (
            f"comes at position {entry.chain_seq} after position {seq}: an entry before it "
            "was deleted"
        )
    if entry.id <= last_id:
        return "its ID is out of the chain's order (rows reordered by hand?)"
    if entry.chain_hash != entry_hash(Content.of(entry), previous):
        return "its hash does not match its content and the previous entry (edited by hand?)"
    return None


@dataclass
class Heads:
    """What :func:`verify` found: each dataset's head and its first break, if any."""

    heads: dict[str, tuple[int, str]]
    breaks: list[Break]


def verify(session: Session) -> Heads:
    """Check every chain of the ledger, entry by entry: positions without gaps, IDs in the
    chain's order, each hash recomputed from the row and the previous hash. A dataset's
    break is its first: the lowest ID of a row inserted by hand and of the first row where
    the chain breaks."""
    broken: dict[str, Break] = {}
    heads: dict[str, tuple[int, str]] = {}
    state: dict[str, tuple[int, str, int]] = {}  # dataset -> seq, hash, ID
    for entry in _rows(session):
        dataset = entry.dataset_id
        if dataset in broken:
            continue  # its first break is found
        seq, previous, last_id = state.get(dataset, (0, GENESIS, 0))
        why = _check(entry, seq, previous, last_id)
        if why is not None:
            broken[dataset] = Break(dataset, entry.id, entry.chain_seq, why)
            continue
        state[dataset] = (seq + 1, str(entry.chain_hash), entry.id)
        heads[dataset] = (seq + 1, str(entry.chain_hash))
    for dataset, unchained in _unchained(session).items():
        known = broken.get(dataset)
        if known is None or (known.entry_id or 0) > (unchained.entry_id or 0):
            broken[dataset] = unchained
    return Heads(heads, sorted(broken.values(), key=lambda b: (b.dataset_id, b.entry_id or 0)))
