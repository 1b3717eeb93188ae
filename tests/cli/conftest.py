"""Fixtures of the client-command tests: a live API (uvicorn in a thread) with the in-process
worker and the fake backend, and ``dpsyn`` to run a client command against it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import app as cli
from tests.cli.live_server import CODES, KEY, SECRET, runner, serving_with_worker
from tests.synthesis.fake_backend import FakeBackend


@pytest.fixture
def fake_backend() -> FakeBackend:
    """The server's model (a test parametrizes ``fake_backend`` to use another one)."""
    return FakeBackend()


@pytest.fixture
def server(sqlite_url, fake_backend) -> Iterator[str]:
    """A live API on a free port, jobs in its in-process worker; yields its URL."""
    with serving_with_worker(sqlite_url, fake_backend, KEY, progress_interval_s=0) as url:
        yield url


@pytest.fixture
def dpsyn(server, monkeypatch, tmp_path):
    """Run a client command against ``server`` (keyword arguments go to the runner, e.g.
    ``input``); returns the result (exit code, output)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSYN_URL", server)
    monkeypatch.setenv("DPSYN_API_KEY", KEY)

    def run(*args: str, **kwargs):
        return runner.invoke(cli, list(args), **kwargs)

    return run


@pytest.fixture
def trec_file(tmp_path) -> Path:
    """TREC lines, 20 per label, each carrying the secret word."""
    path = tmp_path / "trec.txt"
    lines = [
        f"{code}:x {SECRET}{code}{i} what is it ?" for code in sorted(CODES) for i in range(20)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
