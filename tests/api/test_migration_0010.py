"""Migration 0010 (a budget's warn threshold), on SQLite and PostgreSQL: an existing budget
gets the default 0.8, the schema then matches the models, and it downgrades and upgrades."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}


def test_0010_adds_warn_threshold_with_the_default(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0009")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), NOW
            )
            conn.execute(
                text(
                    "INSERT INTO datasets (id, tenant_id, name, task, kind, record_count, "
                    "label_counts, created_at) VALUES ('d', 't', 'd', '{}', 'private', 1, '{}', "
                    ":now)"
                ),
                NOW,
            )
            conn.execute(
                text(
                    "INSERT INTO budgets (dataset_id, epsilon, delta, accounting, updated_at) "
                    "VALUES ('d', 2.0, 0.001, 'tight', :now)"
                ),
                NOW,
            )
        command.upgrade(config, "0010")
        with engine.connect() as conn:
            value = conn.execute(text("SELECT warn_threshold FROM budgets")).scalar_one()
            assert value == 0.8
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "0009")
        columns = {c["name"] for c in inspect(engine).get_columns("budgets")}
        assert "warn_threshold" not in columns
        command.upgrade(config, "0010")
        columns = {c["name"] for c in inspect(engine).get_columns("budgets")}
        assert "warn_threshold" in columns
    finally:
        engine.dispose()
