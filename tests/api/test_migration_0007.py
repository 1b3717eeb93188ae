"""Migration 0007 (dashboard sessions on the server), on SQLite and PostgreSQL: the schema then
matches the models, a session row round-trips, and it downgrades and upgrades again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}


def test_0007_creates_ui_sessions_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0006")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), NOW
            )
            conn.execute(
                text(
                    "INSERT INTO api_keys (id, tenant_id, key_hash, scope, created_at, revoked) "
                    "VALUES ('k', 't', 'h', 'admin', :now, false)"
                ),
                NOW,
            )
        command.upgrade(config, "head")  # 0007, and the revisions after it for the models
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO ui_sessions (id, key_id, created_at, expires_at) "
                    "VALUES (:id, 'k', :now, :now)"
                ),
                {"id": "a" * 64, **NOW},
            )
            assert conn.execute(text("SELECT key_id FROM ui_sessions")).scalar_one() == "k"
        command.downgrade(config, "0006")
        assert "ui_sessions" not in inspect(engine).get_table_names()
        command.upgrade(config, "0007")
        assert "ui_sessions" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
