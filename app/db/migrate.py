"""Bring a database to the latest schema. Alembic is the only way the schema changes.

The migration scripts live inside the package (``app/db/migrations/``) so that an installed
``dpsyn`` (a wheel, a container image) migrates without a source checkout; ``alembic.ini`` at
the top of the checkout points at the same folder for developers who run ``alembic`` itself.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from app.db.files import create_private_sqlite_file

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic configuration for ``url`` that needs no ini file (an installed package has
    none); the URL's ``%`` are escaped because Alembic interpolates option values."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


#: The migration that sealed the records: an SQLite file migrated past it is vacuumed.
SEALED_RECORDS = "0022"


def upgrade(url: str) -> None:
    """Apply every migration in ``app/db/migrations/`` to the database at ``url`` (a new
    SQLite file is created private first)."""
    create_private_sqlite_file(url)
    before = current_revision(url)
    command.upgrade(alembic_config(url), "head")
    if before is not None and before < SEALED_RECORDS and url.startswith("sqlite"):
        _compact_sqlite(url)


def _compact_sqlite(url: str) -> None:
    """Rewrite an SQLite file and empty its WAL (outside any transaction, which VACUUM
    needs), so that no page of the plain records sealed by migration 0022 is left behind."""
    from app.db.session import get_engine

    raw = get_engine(url).raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.execute("VACUUM")
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cursor.close()
    finally:
        raw.close()


def head_revision() -> str | None:
    """The newest revision this package knows."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (None: never migrated)."""
    from app.db.session import get_engine

    with get_engine(url).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
