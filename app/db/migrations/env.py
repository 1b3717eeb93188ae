"""Alembic environment: the schema of app.db.models, at the URL given by the caller."""

from __future__ import annotations

from alembic import context

from app.db.models import Base
from app.db.session import get_engine
from app.settings import get_settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().database_url


def run_migrations_online() -> None:
    with get_engine(url).connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=url.startswith("sqlite"),
        )
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
