"""Persistence: SQLAlchemy 2 models and sessions. Alembic (``migrations/``) owns the schema."""
