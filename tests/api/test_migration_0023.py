"""Migration 0023 (who read what, records dropped after a retention period), on SQLite and
PostgreSQL: the table and the column appear, the schema matches the models, existing datasets
keep their records (nothing dropped), and it downgrades and upgrades again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from tests.api.test_migration_0002 import (  # noqa: F401 (the fixture)
    empty_url,
    schema_differences,
    seed_datasets,
    seeded_at,
)

NOW = {"now": "2026-01-01 00:00:00"}


def test_0023_adds_the_reads_and_the_dropped_mark_and_downgrades(
    empty_url: str,  # noqa: F811
    tmp_path,
    monkeypatch,
) -> None:
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    with seeded_at(empty_url, "0022", seed_datasets) as (config, engine):
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
        assert schema_differences(engine) == []
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM record_reads")).scalar() == 0
