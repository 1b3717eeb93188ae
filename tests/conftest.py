"""Shared fixtures: real PostgreSQL and Redis, each test run with its own database.

Tests that need a service skip with the reason when it is unreachable, unless
``REQUIRE_SERVICES=1`` (set by ``.ci/run``), where they fail instead.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

PG_HOST = os.environ.get("DPSYN_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("DPSYN_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("DPSYN_TEST_PG_USER", "postgres")
REDIS_URL = os.environ.get("DPSYN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or fail under REQUIRE_SERVICES=1) when ``name`` at host:port is unreachable."""
    if _reachable(host, port):
        return
    reason = f"{name} is not reachable at {host}:{port}"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} and REQUIRE_SERVICES=1")
    pytest.skip(reason)


def _admin_url(database: str = "postgres") -> str:
    return f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test run, dropped afterwards."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    from sqlalchemy import create_engine, text

    from app.db.migrate import upgrade

    name = f"dpsyn_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = _admin_url(name)
    try:
        upgrade(url)
        yield url
    finally:
        from app.db.session import get_engine

        get_engine(url).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A fresh, migrated SQLite database file (the embedded mode's store)."""
    from app.db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'dpsyn.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis broker (database 0 is not flushed; tests use their own queue names)."""
    host_port = REDIS_URL.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    require_service("Redis", host, int(port))
    return REDIS_URL


@pytest.fixture(scope="session")
def vllm_server():
    """A real vLLM server (scripts/vllm_serve.sh, the packaged model), one per session."""
    from tests import vllm_server as engine

    found = engine.external()
    if found is not None:
        yield found
        return
    if (reason := engine.vllm_installed()) is not None:
        engine.unavailable(reason)
    from tests.workers.processes import free_port

    server = engine.start(free_port())
    try:
        yield server
    finally:
        server.close()
