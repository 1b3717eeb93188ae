"""Migration 0002 on a database that already holds 0001 rows, on SQLite and PostgreSQL:
existing datasets become private, the schema then matches the models, and it downgrades."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, text

from app.db.migrate import alembic_config
from app.db.models import Base
from tests.conftest import PG_HOST, PG_PORT, _admin_url, require_service


def _config(url: str) -> Config:
    return alembic_config(url)


def seed_datasets(conn, datasets: tuple[str, ...] = ("d",), records: int = 0) -> None:
    """Tenant ``t`` and its private ``datasets``, each of ``records`` records of label ``a``,
    written as a schema of revision 0012 or later holds them (``counts_public`` exists)."""
    now = {"now": "2026-01-01 00:00:00"}
    conn.execute(text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"), now)
    counts = f'{{"a": {records}}}' if records else "{}"
    for dataset in datasets:
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, "
                "record_count, created_at, counts_public) VALUES (:d, 't', 'n', 'private', "
                "'{}', :counts, :records, :now, :false)"
            ),
            {**now, "d": dataset, "counts": counts, "records": records, "false": False},
        )


@contextlib.contextmanager
def seeded_at(
    url: str, revision: str, seed: Callable[[Connection], None]
) -> Iterator[tuple[Config, Engine]]:
    """The database at ``url`` migrated to ``revision`` and given ``seed``'s rows, as the
    migration under test finds it: its alembic config and an engine (disposed after)."""
    config = alembic_config(url)
    command.upgrade(config, revision)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            seed(conn)
        yield config, engine
    finally:
        engine.dispose()


def schema_differences(engine: Engine) -> list[object]:
    """What the database's schema lacks or adds against the models (empty when they agree)."""
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    name = f"dpsyn_mig_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield _admin_url(name)
    finally:
        from app.db.session import get_engine

        get_engine(_admin_url(name)).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_0002_upgrades_existing_rows_and_downgrades(empty_url: str) -> None:
    config = _config(empty_url)
    command.upgrade(config, "0001")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"),
                {"now": "2026-01-01 00:00:00"},
            )
            conn.execute(
                text(
                    "INSERT INTO datasets (id, tenant_id, name, task, label_counts, "
                    "record_count, created_at) VALUES ('d', 't', 'old', '{}', '{}', 0, :now)"
                ),
                {"now": "2026-01-01 00:00:00"},
            )
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT kind FROM datasets")).scalar_one() == "private"
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        command.downgrade(config, "0001")
        with engine.connect() as conn:
            columns = conn.execute(text("SELECT * FROM jobs")).keys()
            assert "public_dataset_id" not in columns and "stats" not in columns
        command.upgrade(config, "head")
    finally:
        engine.dispose()
