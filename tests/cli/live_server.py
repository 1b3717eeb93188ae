"""What the client-command tests share besides their fixtures (in ``conftest.py``): the test
server's admin key, a secret word planted in the records (it must never come back), the
small synthesis settings, and helpers."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from app.llm.base import LLMBackend
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from workers.inprocess import InProcessQueue

KEY = "test-admin-key-for-the-client-cli-0123456789"
SECRET = "SECRETWORD"
CODES = {"ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM"}
# --min-words 1: the fake model writes one-word demonstrations, which these tests mean to serve
# (the rule has tests of its own: tests/synthesis/test_demonstration_rules.py)
FAST = ["--M", "4", "--N", "2", "--tmax", "4", "--K", "10", "--min-words", "1", "--shots", "2"]

runner = CliRunner()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """``app`` on a free port (uvicorn in a thread) while the block runs; yields its URL."""
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(10)


@contextmanager
def serving_with_worker(
    sqlite_url: str, backend: LLMBackend, key: str, **queue_options: Any
) -> Iterator[str]:
    """A live API on ``sqlite_url`` whose admin key is ``key``, its jobs run by its in-process
    worker on ``backend``, while the block runs; yields its URL."""
    provider = StaticProvider(backend)
    queue = InProcessQueue(database_url=sqlite_url, provider=provider, **queue_options).start()
    app = create_app(
        Settings(database_url=sqlite_url, bootstrap_api_key=key),
        queue=queue,
        backend_provider=provider,
    )
    try:
        with serving(app) as url:
            yield url
    finally:
        queue.close()


_UPLOADS = itertools.count()


def upload(dpsyn, path: Path) -> str:
    """Upload a TREC file with the ``dpsyn`` fixture; the new dataset's ID. Each call sends
    records of its own (a word added to each question): a tenant's records uploaded again
    are refused (docs/privacy.md, "Budgets follow the records")."""
    n = next(_UPLOADS)
    own = path.with_name(f"{path.stem}-{n}{path.suffix}")
    lines = path.read_text().splitlines()
    own.write_text("".join(f"{line.rstrip()} u{n}\n" for line in lines if line.strip()))
    result = dpsyn("datasets", "upload", str(own), "--task", "trec", "-q")
    assert result.exit_code == 0, result.output
    return result.output.strip()
