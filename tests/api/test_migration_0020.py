"""Migration 0020 (budgets follow the records, issue 51), on SQLite and PostgreSQL: an
existing dataset and its ledger keep their own budget (no link, no fingerprints), the schema
then matches the models, and it downgrades (dropping the table and the column) and upgrades
again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url, seed_datasets  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}


def _columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_0020_keeps_existing_datasets_on_their_own_budgets(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0019")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            seed_datasets(conn, records=1)
            conn.execute(
                text(
                    "INSERT INTO budgets (dataset_id, epsilon, delta, accounting, updated_at, "
                    "warn_threshold) VALUES ('d', 3, 1e-6, 'tight', :now, 0.8)"
                ),
                NOW,
            )
            conn.execute(
                text(
                    "INSERT INTO ledger (dataset_id, job_id, kind, epsilon, delta, event, "
                    "created_at) VALUES ('d', 'j', 'reserve', 1, 1e-6, '{}', :now)"
                ),
                NOW,
            )
        command.upgrade(config, "0020")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT budget_dataset_id FROM datasets")).one() == (None,)
            assert conn.execute(text("SELECT count(*) FROM record_fingerprints")).scalar() == 0
            assert conn.execute(text("SELECT dataset_id FROM ledger")).scalar_one() == "d"
            conn.execute(
                text(
                    "INSERT INTO record_fingerprints (tenant_id, fingerprint, dataset_id, "
                    "created_at) VALUES ('t', :fp, 'd', :now)"
                ),
                {**NOW, "fp": "f" * 64},
            )
            conn.commit()
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "0019")
        assert "budget_dataset_id" not in _columns(engine, "datasets")
        assert "record_fingerprints" not in inspect(engine).get_table_names()
        with engine.connect() as conn:  # the dataset and its ledger survive the downgrade
            assert conn.execute(text("SELECT id FROM datasets")).scalar_one() == "d"
            assert conn.execute(text("SELECT count(*) FROM ledger")).scalar() == 1
        command.upgrade(config, "0020")
        assert "budget_dataset_id" in _columns(engine, "datasets")
    finally:
        engine.dispose()
