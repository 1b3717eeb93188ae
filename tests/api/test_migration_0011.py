"""Migration 0011 (a prompt's validation score, a job's validation set and submitter), on
SQLite and PostgreSQL: existing rows get NULL in the three new columns (an old job has no
submitter, an old prompt no score), the schema then matches the models, and it downgrades
and upgrades again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}


def _columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def _seed(engine) -> None:
    """A tenant, a dataset, a succeeded job and its prompt set, as 0010 stores them."""
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), NOW
        )
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant_id, name, task, kind, record_count, "
                "label_counts, created_at) VALUES ('d', 't', 'd', '{}', 'private', 1, '{}', :now)"
            ),
            NOW,
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, event, "
                "epsilon, delta, status, progress_done, progress_total, touched_data, "
                "cancel_requested, attempts, created_at) VALUES ('j', 't', 'd', 'tang', '{}', "
                "'[]', '{}', 1.0, 0.001, 'succeeded', 1, 1, true, false, 1, :now)"
            ),
            NOW,
        )
        conn.execute(
            text(
                "INSERT INTO prompt_sets (id, tenant_id, job_id, dataset_id, task, "
                "demonstrations, prompt, method, model, epsilon, delta, created_at) VALUES "
                "('p', 't', 'j', 'd', '{}', '[]', 'x', 'tang', 'fake', 1.0, 0.001, :now)"
            ),
            NOW,
        )


def test_0011_adds_nullable_columns_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0010")
    engine = create_engine(empty_url)
    try:
        _seed(engine)
        command.upgrade(config, "0011")
        with engine.connect() as conn:
            job = conn.execute(text("SELECT validation_dataset_id, submitted_by FROM jobs")).one()
            assert tuple(job) == (None, None)
            assert conn.execute(text("SELECT validation FROM prompt_sets")).scalar_one() is None
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "0010")
        assert not {"validation_dataset_id", "submitted_by"} & _columns(engine, "jobs")
        assert "validation" not in _columns(engine, "prompt_sets")
        with engine.connect() as conn:  # the rows themselves survive the downgrade
            assert conn.execute(text("SELECT id FROM prompt_sets")).scalar_one() == "p"
        command.upgrade(config, "0011")
        assert {"validation_dataset_id", "submitted_by"} <= _columns(engine, "jobs")
        assert "validation" in _columns(engine, "prompt_sets")
    finally:
        engine.dispose()
