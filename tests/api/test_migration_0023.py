"""Migration 0023 (who read what, records dropped after a retention period), on SQLite and
PostgreSQL: the table and the column appear, the schema matches the models, existing datasets
keep their records (nothing dropped), and it downgrades and upgrades again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url, seed_datasets  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}


def test_0023_adds_the_reads_and_the_dropped_mark_and_downgrades(
    empty_url: str,  # noqa: F811
    tmp_path,
    monkeypatch,
) -> None:
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    config = alembic_config(empty_url)
    command.upgrade(config, "0022")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            seed_datasets(conn)
        command.upgrade(config, "0023")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT records_dropped_at FROM datasets")).all() == [(None,)]
            conn.execute(
                text(
                    "INSERT INTO record_reads (dataset_id, reader_kind, reader_id, process, "
                    "record_count, read_at) VALUES ('d', 'job', 'j', 'host:1', 3, :now)"
                ),
                NOW,
            )
            conn.commit()
        command.downgrade(config, "0022")
        schema = inspect(engine)
        assert "record_reads" not in schema.get_table_names()
        assert "records_dropped_at" not in {c["name"] for c in schema.get_columns("datasets")}
        command.upgrade(config, "head")  # the later revisions' schema is the models' too
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
            assert conn.execute(text("SELECT count(*) FROM record_reads")).scalar() == 0
    finally:
        engine.dispose()
