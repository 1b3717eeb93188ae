"""Migration 0014 (a key's name and last use, issue 34), on SQLite and PostgreSQL: an existing
key keeps working with no name and no last use, the schema then matches the models, and it
downgrades (dropping only the two columns) and upgrades again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}
COLUMNS = {"name", "last_used_at"}


def _columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_0014_adds_nullable_name_and_last_use_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0013")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), NOW
            )
            conn.execute(
                text(
                    "INSERT INTO api_keys (id, tenant_id, key_hash, scope, created_at, revoked) "
                    "VALUES ('k', 't', :hash, 'admin', :now, :false)"
                ),
                {**NOW, "hash": "0" * 64, "false": False},
            )
        command.upgrade(config, "0014")
        with engine.connect() as conn:
            row = conn.execute(text("SELECT name, last_used_at, scope FROM api_keys")).one()
            assert tuple(row) == (None, None, "admin")
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "0013")
        assert not COLUMNS & _columns(engine, "api_keys")
        with engine.connect() as conn:  # the key itself survives the downgrade
            assert conn.execute(text("SELECT id FROM api_keys")).scalar_one() == "k"
        command.upgrade(config, "0014")
        assert _columns(engine, "api_keys") >= COLUMNS
    finally:
        engine.dispose()
