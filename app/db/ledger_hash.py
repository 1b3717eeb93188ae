"""The canonical text and hash of one ledger entry in its dataset's chain.

Here, in the storage layer, so that migration 0021 (which started the chains from the rows
it found) and :mod:`app.ledger.chain` (which writes and verifies them) hash alike without the
migrations importing the ledger package. What a chain is and why: :mod:`app.ledger.chain`.

The canonical text (version ``dpsyn-ledger-v1``) is a JSON array of strings and integers:
floats are written by ``repr`` (exact, and the same after a round trip through SQLite's REAL
or PostgreSQL's double precision), the event as JSON with sorted keys, the timestamp in UTC
with microseconds (SQLite returns it naive, PostgreSQL with its zone). Changing it needs a new
version tag: the rows chained before keep theirs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.models import LedgerEntry, as_utc

VERSION = "dpsyn-ledger-v1"
#: The "previous hash" of a chain's first entry.
GENESIS = "0" * 64


class Origin:
    """``chain_origin``: how an entry came into its chain (None: written by the service)."""

    MIGRATION = "migration"  # existed when migration 0021 started the chains
    RESTORED = "restored"  # re-applied from the exported heads after a restore


def _number(value: Any) -> str:
    number = float(value)
    return repr(number) if math.isfinite(number) else str(number)


def canonical_event(event: Any) -> str:
    """The event as canonical JSON (sorted keys, no spaces): the same text for the dict
    written and the dict read back from either database."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def timestamp(value: datetime) -> str:
    """A stored timestamp as the chain writes it: UTC, with microseconds."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Content:
    """What an entry's hash covers, as plain values (from a row, or a line of the heads
    file)."""

    dataset_id: str
    seq: int
    origin: str | None
    job_id: str
    kind: str
    epsilon: float
    delta: float
    event: Any
    created_at: str  # :func:`timestamp`
    batch_id: str | None

    @classmethod
    def of(cls, entry: LedgerEntry) -> Content:
        return cls(
            dataset_id=entry.dataset_id,
            seq=int(entry.chain_seq or 0),
            origin=entry.chain_origin,
            job_id=entry.job_id,
            kind=entry.kind,
            epsilon=float(entry.epsilon),
            delta=float(entry.delta),
            event=entry.event,
            created_at=timestamp(entry.created_at),
            batch_id=entry.batch_id,
        )


def entry_hash(content: Content, previous: str) -> str:
    """The SHA-256 (hex) of the entry's canonical text, chained to ``previous``."""
    text = json.dumps(
        [
            VERSION,
            content.dataset_id,
            content.seq,
            previous,
            content.origin or "",
            content.job_id,
            content.kind,
            _number(content.epsilon),
            _number(content.delta),
            canonical_event(content.event),
            content.created_at,
            content.batch_id,
        ],
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()
