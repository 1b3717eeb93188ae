"""The ``sqlite_url`` fixture copies one migrated file per test process (tests/conftest.py):
each copy must be what ``app.db.migrate.upgrade`` makes, private, at head, whole, and the
schema of the models."""

from __future__ import annotations

import os
import stat

from sqlalchemy import create_engine, text

from app.db.migrate import current_revision, head_revision
from tests.api.test_migration_0002 import schema_differences


def test_each_sqlite_url_is_a_private_database_at_head(sqlite_url: str) -> None:
    path = sqlite_url.split("///", 1)[1]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert current_revision(sqlite_url) == head_revision()
    engine = create_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
            assert conn.execute(text("SELECT count(*) FROM datasets")).scalar() == 0
        assert schema_differences(engine) == []
    finally:
        engine.dispose()
