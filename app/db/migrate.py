"""Bring a database to the latest schema. Alembic is the only way the schema changes."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from app.db.files import create_private_sqlite_file

ROOT = Path(__file__).resolve().parents[2]


def upgrade(url: str) -> None:
    """Apply every migration in ``migrations/`` to the database at ``url`` (a new SQLite
    file is created private first)."""
    create_private_sqlite_file(url)
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, "head")
