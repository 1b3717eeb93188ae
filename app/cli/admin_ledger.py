"""``dpsyn admin ledger``: check the ledger's hash chains against themselves and against the
heads exported outside the database, list the held datasets, and acknowledge a hold
(:mod:`app.ledger.chain`, :mod:`app.ledger.heads`; docs/service.md "The ledger is
tamper-evident").

``verify`` exits 0 when every chain holds and every exported head is in the database, else 1,
naming the first broken entry of each broken chain on stderr (and every finding with
``--json`` on stdout)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from app.cli.admin import DataDirOpt, JsonOpt, _check_schema, _say, database_url
from app.cli.http_client import print_json, print_rows
from app.cli.timestamps import shown_time

ledger_app = typer.Typer(
    help="The ledger's hash chains: verify them, list held datasets, acknowledge a restore.",
    no_args_is_help=True,
)


def _behind(session: Any, url: str) -> list[str]:
    """The exported heads the database lacks, in words (nothing is held by this check)."""
    from app.ledger.heads import _stored_hash, heads_path, read_exported

    found = []
    for dataset_id, positions in sorted(read_exported(heads_path(url)).items()):
        if not positions:
            continue
        seq = max(positions)
        if _stored_hash(session, dataset_id, seq) != positions[seq]["hash"]:
            found.append(
                f"dataset {dataset_id}: the exported head (position {seq}) is not in the "
                "database: restored from an older backup, or rewritten"
            )
    return found


@ledger_app.command("verify")
def ledger_verify(as_json: JsonOpt = False, data_dir: DataDirOpt = Path(".dpsyn")) -> None:
    """Check every dataset's hash chain and the exported heads; exit 1 on any break."""
    from app.db.session import session_scope
    from app.ledger.chain import verify

    url = database_url(data_dir)
    _check_schema(url)
    with session_scope(url) as session:
        found = verify(session)
        behind = _behind(session, url)
    problems = [str(b) for b in found.breaks] + behind
    if as_json:
        print_json(
            {
                "ok": not problems,
                "chains": len(found.heads) + len(found.breaks),
                "breaks": [b.__dict__ for b in found.breaks],
                "behind_exported_heads": behind,
            }
        )
    for problem in problems:
        _say(f"broken: {problem}")
    if problems:
        raise typer.Exit(code=1)
    _say(f"ok: {len(found.heads)} chains verified")


@ledger_app.command("holds")
def ledger_holds(as_json: JsonOpt = False, data_dir: DataDirOpt = Path(".dpsyn")) -> None:
    """The datasets whose ledger was found behind its exported heads, and their state."""
    from app.db.models import as_utc
    from app.db.session import session_scope
    from app.ledger.heads import holds

    url = database_url(data_dir)
    _check_schema(url)
    with session_scope(url) as session:
        rows = [
            {
                "dataset_id": h.dataset_id,
                "held": h.acknowledged_at is None,
                "detected_at": as_utc(h.detected_at).isoformat(),
                "database_position": h.database_seq,
                "exported_position": h.exported_seq,
                "acknowledged_at": as_utc(h.acknowledged_at).isoformat()
                if h.acknowledged_at
                else None,
                "reapplied": h.reapplied,
            }
            for h in holds(session)
        ]
    if as_json:
        print_json(rows)
    else:
        header = ["dataset_id", "held", "detected_at", "database_position", "exported_position"]
        shown = [{**row, "detected_at": shown_time(str(row["detected_at"]))} for row in rows]
        print_rows(header, [[str(row[name]) for name in header] for row in shown])


@ledger_app.command("acknowledge")
def ledger_acknowledge(
    dataset: Annotated[str, typer.Argument(help="The held dataset's ID.")],
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """Re-apply the spend a restored database lost (the exported entries it lacks) and admit
    jobs on the dataset again."""
    from app.db.session import session_scope
    from app.ledger.heads import HeadsError, acknowledge

    url = database_url(data_dir)
    _check_schema(url)
    try:
        with session_scope(url) as session:
            done = acknowledge(session, dataset, url)
    except HeadsError as error:
        _say(f"error: {error}")
        raise typer.Exit(code=1) from None
    _say(
        f"acknowledged: dataset {done.dataset_id}: {done.reapplied} entries re-applied, "
        f"{done.skipped} already in the database"
    )
    if done.unexported:
        _say(
            f"warning: positions {done.unexported} were never exported (lost before the "
            "restore): their spend could not be re-applied"
        )
