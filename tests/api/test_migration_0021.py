"""Migration 0021 (the tamper-evident ledger), on SQLite and PostgreSQL: the chains start from
the existing rows (marked "migration"), the service's own recomputation agrees with the
migration's hashes (floats and timestamps as each database returns them), new entries chain
on, the schema matches the models, and it downgrades and upgrades again."""

from __future__ import annotations

import json

from alembic import command
from sqlalchemy import inspect, text

from app.db.session import session_scope
from app.ledger import chain, ledger
from app.privacy.accounting import Accounting
from app.privacy.events import to_dict
from tests.api.test_migration_0002 import (  # noqa: F401 (the fixture)
    empty_url,
    schema_differences,
    seed_datasets,
    seeded_at,
)
from tests.ledger.test_ledger_postgres import DELTA, job_event

NOW = {"now": "2026-01-01 00:00:00.123456"}
# A real job's event (floats such as sigma and the sampling rates among it), as stored.
EVENT = json.dumps(to_dict(job_event()[0]))


def _seed(conn) -> None:
    seed_datasets(conn, ("d", "e"), records=1)
    conn.execute(
        text(
            "INSERT INTO budgets (dataset_id, epsilon, delta, accounting, updated_at, "
            "warn_threshold) VALUES ('d', 30, 1e-5, 'tight', :now, 0.8)"
        ),
        NOW,
    )
    rows = [
        ("d", "j1", "reserve", 0.1 + 0.2),
        ("e", "k1", "reserve", 1 / 3),
        ("d", "j1", "commit", 0.1 + 0.2),
    ]
    for dataset, job, kind, epsilon in rows:
        conn.execute(
            text(
                "INSERT INTO ledger (dataset_id, job_id, kind, epsilon, delta, event, "
                "created_at) VALUES (:d, :j, :k, :eps, 1e-6 / 3, :event, :now)"
            ),
            {**NOW, "d": dataset, "j": job, "k": kind, "eps": epsilon, "event": EVENT},
        )


def test_0021_starts_the_chains_from_the_existing_rows(
    empty_url: str,  # noqa: F811
    tmp_path,
    monkeypatch,
) -> None:
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    with seeded_at(empty_url, "0020", _seed) as (config, engine):
        command.upgrade(config, "0021")
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT dataset_id, chain_seq, chain_origin FROM ledger ORDER BY id")
            ).all()
        assert [tuple(r) for r in rows] == [
            ("d", 1, "migration"),
            ("e", 1, "migration"),
            ("d", 2, "migration"),
        ]
        with session_scope(empty_url) as session:
            found = chain.verify(session)
            assert found.breaks == []
            assert {d: seq for d, (seq, _) in found.heads.items()} == {"d": 2, "e": 1}
            event, epsilon = job_event()
            ledger.admit(
                session,
                dataset_id="d",
                job_id="j2",
                event=event,
                epsilon=epsilon,
                delta=DELTA,
                accounting=Accounting.TIGHT,
            )
        with session_scope(empty_url) as session:
            found = chain.verify(session)
            assert found.breaks == []
            assert found.heads["d"][0] == 3
            assert [e.chain_origin for e in ledger.history(session, "d")] == [
                "migration",
                "migration",
                None,
            ]
        command.upgrade(config, "head")
        assert schema_differences(engine) == []
        command.downgrade(config, "0020")
        columns = {c["name"] for c in inspect(engine).get_columns("ledger")}
        assert not columns & {"chain_seq", "chain_hash", "chain_origin"}
        assert "ledger_holds" not in inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM ledger")).scalar() == 4
        command.upgrade(config, "0021")  # the chains start anew from the rows as they are
        with session_scope(empty_url) as session:
            assert chain.verify(session).breaks == []
