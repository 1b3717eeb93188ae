"""Migration 0012 (a private dataset's opt-in that its label counts are public, issue 32), on
SQLite and PostgreSQL: an existing dataset gets counts_public false (its jobs release their
counts from now on) and no audit fields, its budget keeps its delta, the schema then matches
the models, and it downgrades and upgrades again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}
COLUMNS = {"counts_public", "counts_public_at", "counts_public_by"}


def _columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def _seed(engine) -> None:
    """A tenant, a private dataset of 300 records and its budget at the old default 1/|D|."""
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), NOW
        )
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant_id, name, task, kind, record_count, "
                "label_counts, created_at) VALUES ('d', 't', 'd', '{}', 'private', 300, "
                "'{\"a\": 300}', :now)"
            ),
            NOW,
        )
        conn.execute(
            text(
                "INSERT INTO budgets (dataset_id, epsilon, delta, accounting, updated_at) "
                "VALUES ('d', 2.0, :delta, 'paper', :now)"
            ),
            {**NOW, "delta": 1 / 300},
        )


def test_0012_adds_counts_public_false_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0011")
    engine = create_engine(empty_url)
    try:
        _seed(engine)
        command.upgrade(config, "0012")
        with engine.connect() as conn:
            row = conn.execute(
                text("SELECT counts_public, counts_public_at, counts_public_by FROM datasets")
            ).one()
            assert (bool(row[0]), row[1], row[2]) == (False, None, None)
            # No data migration of budgets: the stored delta (and so the ledger's) stays.
            assert conn.execute(text("SELECT delta FROM budgets")).scalar_one() == 1 / 300
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "0011")
        assert not COLUMNS & _columns(engine, "datasets")
        with engine.connect() as conn:  # the row itself survives the downgrade
            assert conn.execute(text("SELECT id FROM datasets")).scalar_one() == "d"
        command.upgrade(config, "0012")
        assert _columns(engine, "datasets") >= COLUMNS
    finally:
        engine.dispose()
