"""Engines and sessions, built once per database URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from app.db.files import create_private_sqlite_file


@lru_cache
def get_engine(url: str, *, readonly: bool = False) -> Engine:
    """The engine for ``url``. On SQLite, transactions of the default engine take the write
    lock at BEGIN; ``readonly=True`` gives an engine whose transactions only read (WAL lets
    them run beside a writer), for requests that never write."""
    if not url.startswith("sqlite"):
        return _server_engine(url)
    create_private_sqlite_file(url)  # the records are in it: mode 0600
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy emit BEGIN (below), not pysqlite
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        # Serialise writers from the first statement, so that the ledger's read-check-insert
        # is atomic on SQLite as the budget row lock makes it on PostgreSQL.
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine


@lru_cache
def _server_engine(url: str) -> Engine:
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


@lru_cache
def _factory(url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url), expire_on_commit=False)


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = _factory(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
