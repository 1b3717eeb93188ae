"""The ledger's heads, exported outside the database, and what the service does when the
database is behind them (a restored older backup).

After every commit that wrote ledger entries, each entry is appended as one JSON line to the
**heads file** (``DPSYN_LEDGER_HEADS_PATH``; by default beside the SQLite database,
``<name>.ledger-heads.jsonl``, or ``./.dpsyn/ledger-heads-<database>.jsonl`` for PostgreSQL;
mode 0600, appended under an exclusive ``flock`` by every process) and logged (``ledger head:
dataset ..., position ..., hash ...``). A line holds the entry's chained content (its hash
checks it, :mod:`app.ledger.chain`) and no record text: dataset and job IDs, kind, epsilon,
delta, the event (noise parameters and label counts' shapes, never a record), the time. The
line is written after the commit, so every exported entry was committed; a crash in between
loses a line, which weakens the check for that entry and never raises a false alarm.

At start (:func:`check_at_start`) every chain is verified (breaks are logged as errors) and
the database's entry at each dataset's exported head position must carry the exported hash.
If it does not (the chain is shorter, or other than it was), the dataset is **held**
(``ledger_holds``): admissions charging its budget (jobs, count releases; of every dataset
sharing it) are refused with 409 ``ledger_rolled_back`` until an operator runs
``dpsyn admin ledger acknowledge DATASET`` (:func:`acknowledge`). That re-applies the
exported entries the database lacks (after the longest prefix both agree on), chained anew
with ``chain_origin`` "restored" and their original times, so the budget's spend is what it
was before the restore; then it writes an ``ack`` line, so that the exported head is the
database's again. Re-application is conservative: an entry the database already holds (the
same job and kind) is skipped, and so is an exported release of a job the database has
committed; an exported commit of a job the database released is refused (settle that job by
hand: it read the data in the lost history).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.db.models import Dataset, LedgerEntry, LedgerHold, LedgerKind, now
from app.ledger import chain

log = logging.getLogger("dpsyn.ledger")

ENV = "DPSYN_LEDGER_HEADS_PATH"
_PENDING = "dpsyn_ledger_heads"  # Session.info: the lines to export after the commit


class HeadsError(ValueError):
    """An acknowledgement that cannot be done (the message says why)."""


def heads_path(url: str) -> Path | None:
    """Where the heads of the database at ``url`` are exported (None: nowhere, when
    ``DPSYN_LEDGER_HEADS_PATH`` is ``off`` or the database is in memory)."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("", "off") else Path(configured)
    parsed = make_url(url)
    database = parsed.database
    if parsed.drivername.startswith("sqlite"):
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        file = Path(database)
        return file.with_name(f"{file.stem}.ledger-heads.jsonl")
    return Path(".dpsyn") / f"ledger-heads-{database or 'default'}.jsonl"


def _line(content: chain.Content, digest: str, previous: str) -> dict[str, Any]:
    return {
        "dataset_id": content.dataset_id,
        "seq": content.seq,
        "hash": digest,
        "prev": previous,
        "origin": content.origin,
        "job_id": content.job_id,
        "kind": content.kind,
        "epsilon": content.epsilon,
        "delta": content.delta,
        "event": content.event,
        "created_at": content.created_at,
        "batch_id": content.batch_id,
    }


def exported_after_commit(session: Session, entry: LedgerEntry, previous: str) -> None:
    """Export ``entry`` once its transaction commits (:func:`chain.append` calls this)."""
    line = _line(chain.Content.of(entry), str(entry.chain_hash), previous)
    session.info.setdefault(_PENDING, []).append((entry, line))


def _url(session: Session) -> str:
    return session.get_bind().engine.url.render_as_string(hide_password=False)


@event.listens_for(Session, "after_commit")
def _export(session: Session) -> None:
    pending = session.info.pop(_PENDING, None)
    if not pending:
        return
    # An entry whose savepoint or transaction was rolled back is no longer persistent.
    lines = [line for entry, line in pending if entry is None or inspect(entry).persistent]
    for line in lines:
        if "ack" not in line:
            log.info(
                "ledger head: dataset %s, position %d, hash %s",
                line["dataset_id"],
                line["seq"],
                line["hash"],
            )
    path = heads_path(_url(session))
    if path is None or not lines:
        return
    try:
        write_lines(path, lines)
    except OSError as error:  # committed already: said, never raised
        log.error("could not export the ledger's heads to %s: %s", path, error)


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """Append ``lines`` to the heads file (created with mode 0600), under an exclusive lock
    shared with every other process writing it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)


def _valid(line: dict[str, Any]) -> bool:
    try:
        content = _content(line)
        return chain.entry_hash(content, str(line["prev"])) == line["hash"]
    except (KeyError, TypeError, ValueError):
        return False


def _content(line: dict[str, Any]) -> chain.Content:
    return chain.Content(
        dataset_id=str(line["dataset_id"]),
        seq=int(line["seq"]),
        origin=line["origin"],
        job_id=str(line["job_id"]),
        kind=str(line["kind"]),
        epsilon=float(line["epsilon"]),
        delta=float(line["delta"]),
        event=line["event"],
        created_at=str(line["created_at"]),
        batch_id=line["batch_id"],
    )


def read_exported(path: Path | None) -> dict[str, dict[int, dict[str, Any]]]:
    """Each dataset's exported entries by position. A later line for a position replaces an
    earlier one (a re-application after a restore); an ``ack`` line drops every position
    past its own (the acknowledged chain is the database's). A line whose hash does not
    match its content is left out, and logged."""
    chains: dict[str, dict[int, dict[str, Any]]] = {}
    if path is None or not path.is_file():
        return chains
    bad = 0
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
            positions = chains.setdefault(str(line["dataset_id"]), {})
            seq = int(line["seq"])
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        if line.get("ack"):
            for past in [s for s in positions if s > seq]:
                del positions[past]
        elif _valid(line):
            positions[seq] = line
        else:
            bad += 1
    if bad:
        log.error("%d lines of the ledger heads file %s are not valid: left out", bad, path)
    return chains


def _stored_hash(session: Session, dataset_id: str, seq: int) -> str | None:
    return session.scalar(
        select(LedgerEntry.chain_hash).where(
            LedgerEntry.dataset_id == dataset_id, LedgerEntry.chain_seq == seq
        )
    )


def _hold(session: Session, dataset_id: str, head: dict[str, Any]) -> LedgerHold:
    seq, _ = chain.chain_head(session, dataset_id)
    hold = session.get(LedgerHold, dataset_id)
    if hold is None:
        hold = LedgerHold(dataset_id=dataset_id)
        session.add(hold)
    if hold.acknowledged_at is not None or hold.exported_seq != int(head["seq"]):
        hold.detected_at = now()
    hold.database_seq = seq
    hold.exported_seq = int(head["seq"])
    hold.exported_hash = str(head["hash"])
    hold.acknowledged_at = None
    hold.reapplied = None
    return hold


def behind(session: Session, path: Path | None) -> list[LedgerHold]:
    """Hold every dataset whose chain in the database lacks its exported head (the caller
    commits). An exported dataset the database does not know is logged and left."""
    holds: list[LedgerHold] = []
    for dataset_id, positions in read_exported(path).items():
        if not positions:
            continue
        head = positions[max(positions)]
        if _stored_hash(session, dataset_id, int(head["seq"])) == head["hash"]:
            continue
        if session.get(Dataset, dataset_id) is None:
            log.error(
                "the ledger heads file names dataset %s, which is not in the database "
                "(restored from before its upload?): its spend cannot be re-applied",
                dataset_id,
            )
            continue
        holds.append(_hold(session, dataset_id, head))
    return holds


def check_at_start(session: Session, url: str) -> list[LedgerHold]:
    """The start-up check: log every broken chain, and hold the datasets whose database is
    behind their exported heads (the caller commits). A schema without the chains (an API
    told not to migrate, before ``dpsyn migrate``) has nothing to check."""
    if not inspect(session.get_bind()).has_table("ledger_holds"):
        return []
    for found in chain.verify(session).breaks:
        log.error("the ledger's hash chain is broken: %s (dpsyn admin ledger verify)", found)
    holds = behind(session, heads_path(url))
    for hold in holds:
        log.error(
            "the ledger of dataset %s is behind its exported head (position %d in the "
            "database, %d exported): restored from an older backup? Its admissions are "
            "refused until an operator runs: dpsyn admin ledger acknowledge %s",
            hold.dataset_id,
            hold.database_seq,
            hold.exported_seq,
            hold.dataset_id,
        )
    return holds


@dataclass(frozen=True)
class Acknowledged:
    """What an acknowledgement re-applied: the entries, and the exported positions that
    were missing from the heads file too (lost: re-applied by no one)."""

    dataset_id: str
    reapplied: int
    skipped: int
    unexported: list[int]


def _missing(
    session: Session, dataset_id: str, path: Path | None
) -> tuple[list[dict[str, Any]], list[int]]:
    """The exported entries past the longest prefix the database agrees on, in order, and
    the positions past it that were never exported (lost)."""
    positions = read_exported(path).get(dataset_id, {})
    stored = {
        seq: digest
        for seq, digest in session.execute(
            select(LedgerEntry.chain_seq, LedgerEntry.chain_hash).where(
                LedgerEntry.dataset_id == dataset_id
            )
        )
    }
    agreed = max((s for s, line in positions.items() if stored.get(s) == line["hash"]), default=0)
    past = [positions[s] for s in sorted(positions) if s > agreed]
    lost = [s for s in range(agreed + 1, max(positions, default=0)) if s not in positions]
    return past, lost


def _present(line: dict[str, Any], held: set[tuple[str, str]]) -> bool:
    """Whether the database already accounts for the exported entry ``line``."""
    job, kind = str(line["job_id"]), str(line["kind"])
    if (job, kind) in held:
        return True
    if kind == LedgerKind.RELEASE and (job, LedgerKind.COMMIT.value) in held:
        return True  # charged in the database: it stays charged
    if kind == LedgerKind.COMMIT and (job, LedgerKind.RELEASE.value) in held:
        raise HeadsError(
            f"job {job} was charged in the exported ledger but released in the database: "
            "it read the data in the lost history; settle it by hand, then acknowledge"
        )
    return False


def acknowledge(session: Session, dataset_id: str, url: str) -> Acknowledged:
    """Re-apply the spend the database lost (the exported entries it lacks) and lift the
    dataset's hold; the caller commits. The dataset's row is locked first (the service's
    lock order), so no entry of it is written meanwhile."""
    session.execute(select(Dataset.id).where(Dataset.id == dataset_id).with_for_update())
    hold = session.get(LedgerHold, dataset_id)
    if hold is None or hold.acknowledged_at is not None:
        raise HeadsError(f"dataset {dataset_id} is not held: nothing to acknowledge")
    missing, unexported = _missing(session, dataset_id, heads_path(url))
    held = {
        (str(job), str(kind))
        for job, kind in session.execute(
            select(LedgerEntry.job_id, LedgerEntry.kind).where(LedgerEntry.dataset_id == dataset_id)
        )
    }
    reapplied = 0
    for line in missing:
        if _present(line, held):
            continue
        chain.append(session, _entry(line), origin=chain.Origin.RESTORED)
        held.add((str(line["job_id"]), str(line["kind"])))
        reapplied += 1
    hold.acknowledged_at = now()
    hold.reapplied = reapplied
    seq, digest = chain.chain_head(session, dataset_id)
    ack = {"ack": True, "dataset_id": dataset_id, "seq": seq, "hash": digest}
    session.info.setdefault(_PENDING, []).append((None, ack))
    return Acknowledged(dataset_id, reapplied, len(missing) - reapplied, unexported)


def _entry(line: dict[str, Any]) -> LedgerEntry:
    created = datetime.strptime(str(line["created_at"]), "%Y-%m-%dT%H:%M:%S.%fZ")
    return LedgerEntry(
        dataset_id=str(line["dataset_id"]),
        job_id=str(line["job_id"]),
        kind=str(line["kind"]),
        epsilon=float(line["epsilon"]),
        delta=float(line["delta"]),
        event=line["event"],
        batch_id=line["batch_id"],
        created_at=created.replace(tzinfo=UTC),
    )


def holds(session: Session) -> list[LedgerHold]:
    """Every hold, acknowledged or not, the newest first."""
    return list(session.scalars(select(LedgerHold).order_by(LedgerHold.detected_at.desc())))
