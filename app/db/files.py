"""SQLite database files are private to the service's user.

The database holds every private record, and SQLite creates its file with the process's
umask (often world-readable 0644). Creating the (empty) file first with mode 0600, before
SQLite or Alembic opens it, fixes that; SQLite gives its ``-wal`` and ``-shm`` files the
main file's mode, so they are private too.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url


def create_private_sqlite_file(url: str) -> None:
    """Create the SQLite file of ``url`` with mode 0600 if it does not exist yet.

    Anything else (a server URL, an in-memory or URI database, a missing directory, an
    existing file) is left alone.
    """
    parsed = make_url(url)
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database:
        return
    if database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if path.exists() or not path.parent.is_dir():
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # created meanwhile by another process: its creator chose
        return
    os.close(descriptor)
    os.chmod(path, 0o600)  # whatever the umask
