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


def upgrade(url: str) -> None:
    """Apply every migration in ``app/db/migrations/`` to the database at ``url`` (a new
    SQLite file is created private first)."""
    create_private_sqlite_file(url)
    command.upgrade(alembic_config(url), "head")


def head_revision() -> str | None:
    """The newest revision this package knows."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (None: never migrated)."""
    from app.db.session import get_engine

    with get_engine(url).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
