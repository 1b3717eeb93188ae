"""Real processes for the fault tests: a PostgreSQL and a Redis of the test's own, on free
loopback ports (so that a test can stop them without disturbing anyone), and ``dpsyn worker``.

PostgreSQL refuses to run as root, so when the tests run as root its commands run as the
``postgres`` user (``runuser``); its data directory lives in a temporary directory that user
owns. A missing binary skips the test, naming it, unless ``REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from app.tls import client_context

ROOT = Path(__file__).resolve().parents[2]


def missing(what: str) -> None:
    """Skip (or fail under REQUIRE_SERVICES=1): ``what`` is not installed."""
    reason = f"{what} is not installed"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} and REQUIRE_SERVICES=1")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether a GET of ``url`` answers 200 now (False while a server still starting refuses
    the connection). One TLS context serves every poll (app/tls.py)."""
    try:
        return httpx.get(url, timeout=timeout, verify=client_context()).status_code == 200
    except httpx.TransportError:
        return False


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    tail = log.read_text()[-4000:] if log is not None and log.exists() else "(no log)"
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}; log:\n{tail}")


class OwnPostgres:
    """A throwaway PostgreSQL cluster (trust auth, loopback only, fsync off) that a test may
    stop and start again to simulate an outage."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        initdb = found[-1] if found else shutil.which("initdb")
        if initdb is None:
            missing("PostgreSQL (initdb, looked in /usr/lib/postgresql/*/bin and PATH)")
        self.bin = Path(initdb).parent
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                missing("runuser (PostgreSQL cannot run as root)")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="dpsyn-pg-"))
        if self.as_user:
            shutil.chown(self.dir, user="postgres")
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        data = str(self.dir / "data")
        self._run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        command = [*self.as_user, str(self.bin / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.dir / "data"), "-o", options, "-l", str(self.dir / "log"),
            "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnRedis:
    """A throwaway Redis on a free loopback port (no persistence)."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing("redis-server")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class Worker:
    """``dpsyn worker`` as its own process, logging to ``log``; ``env`` adds DPSYN_* settings."""

    def __init__(self, log: Path, queue: str, env: dict[str, str]) -> None:
        self.log = log
        command = [
            sys.executable, "-c", "from app.cli import main; main()", "worker",
            "--queue", queue, "--hostname", f"{log.stem}-{queue}@%h", "--loglevel", "INFO",
        ]  # fmt: skip
        full_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
        with log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT
            )
        wait_for(lambda: "ready." in self.text(), 30, f"worker {log.stem} to start", log)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, no task is acknowledged."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
