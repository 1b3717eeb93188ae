"""A real vLLM server for the engine tests, started once per test session.

It is started exactly as a deployment starts it, by ``scripts/vllm_serve.sh PORT`` (the CPU
build from ``.venv-vllm`` here, the GPU build on a GPU machine), on the packaged model's
converted folder, so the local transformers backend and the server score the same weights.
Starting takes 80-95 s on two cores, hence one server per session, shared.

Some tests need a server started with other flags (``tests/workers/test_engine_start.py``: one
without ``/tokenizer_info``). :class:`ServerPool` starts every variant the session's selected
tests use *together*, in the background as soon as the tests are collected
(``tests/conftest.py``), and a test that needs one waits for it. A start is mostly
single-threaded imports in three processes at ``nice 10``: it runs on the core the test
process leaves idle and yields to the tests, so by the first vLLM test (a third into the
suite) both servers are up, where they used to cost 74 s + 94 s of waiting one after the
other.

``DPSYN_TEST_VLLM_URL`` points the tests at a server already running (started by the same
script) instead. Without vLLM the tests skip, naming what is missing, unless
``REQUIRE_SERVICES=1``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.workers.processes import http_ok

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "scripts" / "vllm_serve.sh"
START_TIMEOUT_S = float(os.environ.get("DPSYN_TEST_VLLM_START_S", "900"))
MODEL = "gemma-3-270m"
# Added to the script's flags in tests only: skipping torch.compile starts the CPU engine in
# about a minute instead of three on two cores (same kernels' numerics, slower steps).
TEST_ARGS = tuple(os.environ.get("DPSYN_TEST_VLLM_ARGS", "--enforce-eager").split())


@dataclass
class VLLMServer:
    """A running server: its URL, the name it serves, and the log of its start."""

    url: str
    served_name: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    extra_args: tuple[str, ...] = ()

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics`` (vLLM's counters, e.g. prefix-cache hits)."""
        response = httpx.get(f"{self.url}/metrics", timeout=10)
        response.raise_for_status()
        return response.text

    def close(self) -> None:
        """Stop the server and everything it started (it runs in its own process group)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def unavailable(reason: str) -> None:
    """Skip (or fail under REQUIRE_SERVICES=1): no vLLM server can be had here."""
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} and REQUIRE_SERVICES=1")
    pytest.skip(reason)


def engine_python() -> str:
    """The python the serve script would run vLLM with (a GPU build on a GPU machine, else
    .venv-vllm's CPU build); empty when the script cannot say."""
    printed = subprocess.run(
        ["bash", str(SERVE), "0"],
        env={**os.environ, "VLLM_PRINT_COMMAND": "1", "VLLM_MODEL": "unused"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return printed.stdout.split(" ", 1)[0] if printed.returncode == 0 else ""


def vllm_installed() -> str | None:
    """Why vLLM cannot be started here, or None when it can: the python the serve script
    would run must exist."""
    python = engine_python()
    if not (python and (Path(python).exists() or shutil.which(python))):
        return f"vLLM is not installed ({python or 'no python'} is missing: run scripts/setup.sh)"
    return None


def start(port: int, *extra_args: str) -> VLLMServer:
    """Start ``scripts/vllm_serve.sh port TEST_ARGS extra_args...``, wait for ``/health``."""
    server = launch(port, *extra_args)
    try:
        wait_healthy(server, START_TIMEOUT_S)
    except BaseException:
        server.close()
        raise
    return server


def launch(port: int, *extra_args: str) -> VLLMServer:
    """Run ``scripts/vllm_serve.sh port TEST_ARGS extra_args...`` without waiting for it."""
    extra_args = (*TEST_ARGS, *extra_args)
    log = Path(tempfile.mkdtemp(prefix="dpsyn-vllm-")) / f"vllm-{port}.log"
    env = {**os.environ, "DPSYN_MODEL": MODEL}
    env.pop("VLLM_MODEL", None)
    env.pop("VLLM_SERVED_NAME", None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["nice", "-n", "10", "bash", str(SERVE), str(port), *extra_args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return VLLMServer(f"http://127.0.0.1:{port}", MODEL, log, process, extra_args)


def wait_healthy(server: VLLMServer, timeout: float) -> None:
    """Poll ``/health`` until 200; fail with the log's tail if the server dies or is late."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            pytest.fail(f"vLLM exited ({server.process.returncode}) at start:\n{tail(server)}")
        if http_ok(f"{server.url}/health"):
            return
        time.sleep(1)
    pytest.fail(f"vLLM not healthy after {timeout:g} s:\n{tail(server)}")


def tail(server: VLLMServer, chars: int = 4000) -> str:
    return server.log.read_text(errors="replace")[-chars:] if server.log.exists() else ""


def external() -> VLLMServer | None:
    """The server named by DPSYN_TEST_VLLM_URL, if any (it must serve the packaged model)."""
    url = os.environ.get("DPSYN_TEST_VLLM_URL")
    if not url:
        return None
    server = VLLMServer(url.rstrip("/"), MODEL, Path(os.devnull))
    wait_healthy(server, 30)
    return server


class ServerPool:
    """The vLLM servers of one test session, keyed by their extra flags (``()``: the script's
    own), each started once and shared.

    ``needed`` are the variants the session's selected tests use (``tests/conftest.py``
    reads them from the collected tests, so a run of one vLLM test starts one server).
    :meth:`start_needed` starts them all at once without waiting; :meth:`get` waits until
    every started server answers ``/health`` (so none is still starting while a test runs)
    and returns the one asked for, starting it first if nobody did.
    """

    def __init__(self, needed: list[tuple[str, ...]], port: Callable[[], int]) -> None:
        self.needed = list(dict.fromkeys(needed))
        self.port = port
        self.servers: dict[tuple[str, ...], VLLMServer] = {}
        self.ready: set[tuple[str, ...]] = set()
        self.released: set[tuple[str, ...]] = set()
        self.closing: threading.Thread | None = None

    def start_needed(self, *also: tuple[str, ...]) -> None:
        """Start every needed variant (and ``also``) that is not running, without waiting."""
        if (reason := vllm_installed()) is not None:
            unavailable(reason)
        ports = {int(server.url.rsplit(":", 1)[1]) for server in self.servers.values()}
        wanted = [*also, *(v for v in self.needed if v not in self.released)]
        for args in dict.fromkeys(wanted):
            if args in self.servers:
                continue
            while (port := self.port()) in ports:  # a server still starting has not bound it
                pass
            ports.add(port)
            self.servers[args] = launch(port, *args)

    def get(self, extra_args: tuple[str, ...] = ()) -> VLLMServer:
        if extra_args not in self.servers:
            self.start_needed(extra_args)
        for args, server in list(self.servers.items()):
            if args not in self.ready:
                try:
                    wait_healthy(server, START_TIMEOUT_S)
                except BaseException:
                    self.release(args)
                    raise
                self.ready.add(args)
        return self.servers[extra_args]

    def release(self, extra_args: tuple[str, ...]) -> None:
        """Stop a variant whose tests are done (its memory goes back before the session ends)."""
        self.released.add(extra_args)
        self.ready.discard(extra_args)
        server = self.servers.pop(extra_args, None)
        if server is not None:
            server.close()

    def close(self) -> None:
        if self.closing is not None and self.closing is not threading.current_thread():
            self.closing.join()
        for args in list(self.servers):
            self.release(args)

    def close_in_background(self) -> None:
        """Stop every server in a thread: a vLLM server takes seconds to shut down, which the
        tests after the last vLLM test need not wait for (:meth:`close` waits for it)."""
        if self.closing is None and self.servers:
            self.closing = threading.Thread(target=self.close, name="vllm-pool-close")
            self.closing.start()
