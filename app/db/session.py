"""Engines and sessions, built once per database URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from app.db.files import create_private_sqlite_file


@dataclass(frozen=True)
class PoolLimits:
    """How many connections an engine keeps and how long a checkout may wait for one.

    The defaults suit scripts and workers. The API sizes its pools from its settings
    (``Settings.db_pool_size``, ``db_pool_timeout_s``) so that every request thread can hold
    a connection and a request that still cannot get one fails fast (503) instead of
    waiting 30 s. ``overflow`` connections beyond ``size`` are closed when returned."""

    size: int = 5
    overflow: int = 10
    timeout_s: float = 30.0


@lru_cache
def get_engine(url: str, *, readonly: bool = False, pool: PoolLimits | None = None) -> Engine:
    """The engine for ``url``. On SQLite, transactions of the default engine take the write
    lock at BEGIN; ``readonly=True`` gives an engine whose transactions only read (WAL lets
    them run beside a writer), for requests that never write. Engines with different
    ``pool`` limits are distinct engines with pools of their own."""
    if not url.startswith("sqlite"):
        return _server_engine(url, pool or PoolLimits(size=10, overflow=20))
    create_private_sqlite_file(url)  # the records are in it: mode 0600
    pool = pool or PoolLimits()
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=pool.size,
        max_overflow=pool.overflow,
        pool_timeout=pool.timeout_s,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # let SQLAlchemy emit BEGIN (below), not pysqlite
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        # Freed pages are zeroed: a deleted row (a dataset's sealed records, a data key's
        # trace) leaves nothing behind in the file.
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        # Serialise writers from the first statement, so that the ledger's read-check-insert
        # is atomic on SQLite as the budget row lock makes it on PostgreSQL.
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine


@lru_cache
def _server_engine(url: str, pool: PoolLimits) -> Engine:
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=pool.size,
        max_overflow=pool.overflow,
        pool_timeout=pool.timeout_s,
    )


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
