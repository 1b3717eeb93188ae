"""Migration 0024 (dataset names unique per tenant among live datasets), on SQLite and
PostgreSQL: existing duplicates are renamed deterministically (the oldest keeps the name, the
others take the first free ``-N``), deleted datasets and other tenants keep theirs, the
schema matches the models, the index refuses a second live name and lets a deleted one be,
and it downgrades and upgrades again."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from tests.api.test_migration_0002 import (  # noqa: F401 (the fixture)
    empty_url,
    schema_differences,
    seeded_at,
)

LONG = "x" * 200  # the column's limit: its numbered names are cut to fit

# (id, tenant, name, created, deleted)
SEEDED = [
    ("d1", "t", "tickets", "2026-01-01 00:00:01", None),
    ("d2", "t", "tickets", "2026-01-01 00:00:03", None),
    ("d0", "t", "tickets", "2026-01-01 00:00:02", None),  # created between: the first copy
    ("dz", "t", "tickets", "2026-01-01 00:00:00", "2026-01-02 00:00:00"),  # deleted: kept
    ("d3", "t", "tickets-2", "2026-01-01 00:00:04", None),  # a name already taken
    ("e1", "t", LONG, "2026-01-01 00:00:01", None),
    ("e2", "t", LONG, "2026-01-01 00:00:02", None),
    ("u1", "u", "tickets", "2026-01-01 00:00:05", None),  # another tenant's
]
EXPECTED = {
    "d1": "tickets",
    "d0": "tickets-3",
    "d2": "tickets-4",
    "dz": "tickets",
    "d3": "tickets-2",
    "e1": LONG,
    "e2": LONG[:198] + "-2",
    "u1": "tickets",
}


def _seed(conn) -> None:
    for tenant in ("t", "u"):
        conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES (:t, :t, :now)"),
            {"t": tenant, "now": "2026-01-01 00:00:00"},
        )
    for dataset_id, tenant, name, created, deleted in SEEDED:
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, "
                "record_count, created_at, deleted_at, counts_public) VALUES (:d, :t, :n, "
                "'private', '{}', '{}', 0, :created, :deleted, :false)"
            ),
            {
                "d": dataset_id,
                "t": tenant,
                "n": name,
                "created": created,
                "deleted": deleted,
                "false": False,
            },
        )


def _names(conn) -> dict[str, str]:
    return dict(conn.execute(text("SELECT id, name FROM datasets")).all())


def _insert(conn, dataset_id: str, name: str, deleted: str | None = None) -> None:
    conn.execute(
        text(
            "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, record_count, "
            "created_at, deleted_at, counts_public) VALUES (:d, 't', :n, 'private', '{}', "
            "'{}', 0, '2026-01-03 00:00:00', :deleted, :false)"
        ),
        {"d": dataset_id, "n": name, "deleted": deleted, "false": False},
    )


def test_0024_renames_duplicates_then_keeps_names_unique_and_downgrades(
    empty_url: str,  # noqa: F811
    tmp_path,
    monkeypatch,
) -> None:
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    with seeded_at(empty_url, "0023", _seed) as (config, engine):
        command.upgrade(config, "head")  # 0024, and the later revisions' schema for the models
        assert schema_differences(engine) == []
        with engine.connect() as conn:
            assert _names(conn) == EXPECTED
        with pytest.raises(IntegrityError), engine.begin() as conn:
            _insert(conn, "n1", "tickets")
        with engine.begin() as conn:  # a deleted dataset's name, and a free one
            _insert(conn, "n2", "tickets", deleted="2026-01-04 00:00:00")
            _insert(conn, "n3", "tickets-5")
        command.downgrade(config, "0023")
        indexes = {index["name"] for index in inspect(engine).get_indexes("datasets")}
        assert "uq_datasets_live_name" not in indexes
        with engine.begin() as conn:
            _insert(conn, "n4", "tickets")  # no index: a duplicate goes in
        command.upgrade(config, "head")  # 0024, and the later revisions' schema for the models
        assert schema_differences(engine) == []
        with engine.connect() as conn:
            assert _names(conn)["n4"] == "tickets-6"  # -5 was taken by n3
