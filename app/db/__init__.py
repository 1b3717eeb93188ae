"""Persistence: SQLAlchemy 2 models and sessions. Alembic owns the schema: its migrations
live in ``app/db/migrations/``, inside the package, so an installed ``dpsyn`` migrates too."""
