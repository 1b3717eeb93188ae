"""``dpsyn worker`` on the vllm backend checks its engine before it takes a job.

The backend reads the EOS token from vLLM's ``/tokenizer_info``, which answers 404 unless the
server was started with ``--enable-tokenizer-info-endpoint`` (compose's ``gpu`` profile
lacked it: every token-loop job failed, after it had been admitted and charged). Now the
worker asks the server everything a job needs when it starts and exits non-zero naming the
flag.

The server here is the session's real vLLM server behind a small proxy that sends
``/tokenizer_info`` on to a path vLLM does not serve, and everything else on unchanged: the
404 the worker reads is vLLM's own answer for a route it never registered, which is what a
server started without the flag gives (the last test checks, in vLLM's own code, that the
flag is what registers the route). Until 2026-12-07 this was a second vLLM server started
with the flag off: about 70 s of CPU for one request.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests import vllm_server as engine
from tests.workers.processes import ROOT, OwnRedis, free_port

#: The path vLLM is asked instead of ``/tokenizer_info``: one no vLLM server serves.
UNSERVED = "/dpsyn-test-unserved-route"


class _HideTokenizerInfo(BaseHTTPRequestHandler):
    """Forward each request to ``self.server.upstream`` (``/tokenizer_info`` to ``UNSERVED``)
    and answer with the upstream's status, content type and body."""

    def _forward(self) -> None:
        path = UNSERVED if self.path.split("?")[0] == "/tokenizer_info" else self.path
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = httpx.request(
            self.command,
            self.server.upstream + path,  # type: ignore[attr-defined]
            content=body,
            headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
            timeout=60,
        )
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def log_message(self, *args: object) -> None:  # the test reads the worker's output only
        pass


@pytest.fixture(scope="module")
def server_without_tokenizer_info(vllm_server) -> Iterator[str]:
    """The URL of the shared vLLM server as one without ``/tokenizer_info`` serves it."""
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _HideTokenizerInfo)
    proxy.upstream = vllm_server.url  # type: ignore[attr-defined]
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        assert httpx.get(f"{url}/tokenizer_info").status_code == 404  # the premise
        assert httpx.get(f"{vllm_server.url}/tokenizer_info").status_code == 200
        yield url
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    redis = OwnRedis()
    try:
        yield redis.url
    finally:
        redis.close()


def start_worker(url: str, broker: str, tmp_path: Path, **settings: str):
    """``dpsyn worker`` with DPSYN_BACKEND=vllm; it must exit by itself within 2 minutes."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")},
        "PYTHONPATH": str(ROOT),
        "DPSYN_BACKEND": "vllm",
        "DPSYN_VLLM_URL": url,
        "DPSYN_BROKER_URL": broker,
        "DPSYN_DATABASE_URL": f"sqlite:///{tmp_path / 'dpsyn.db'}",
        **settings,
    }
    return subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", "worker"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_server_without_the_tokenizer_info_endpoint_fails_the_worker_start(
    server_without_tokenizer_info, broker, tmp_path
):
    done = start_worker(server_without_tokenizer_info, broker, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the vLLM server cannot run dpsyn's jobs" in done.stderr
    assert "/tokenizer_info: HTTP 404" in done.stderr
    assert "start vLLM with --enable-tokenizer-info-endpoint" in done.stderr
    assert "ready." not in done.stdout + done.stderr  # it never consumed the queue


def test_an_unreachable_server_fails_the_start_once_the_wait_is_over(broker, tmp_path):
    started = time.monotonic()
    closed = f"http://127.0.0.1:{free_port()}"
    done = start_worker(closed, broker, tmp_path, DPSYN_VLLM_START_WAIT_S="3")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not reachable after 3 s (DPSYN_VLLM_START_WAIT_S)" in done.stderr
    assert "connection failed" in done.stderr
    assert 3 <= time.monotonic() - started < 60


ROUTES = """
from argparse import Namespace
from fastapi import FastAPI
from vllm.entrypoints.serve.tokenize.api_router import attach_router
for flag in (False, True):  # False first: attaching with True adds the route to the router
    app = FastAPI()
    app.state.args = Namespace(enable_tokenizer_info_endpoint=flag)
    attach_router(app)
    print(flag, "/tokenizer_info" in {route.path for route in app.routes})
"""


def test_vllm_registers_the_tokenizer_info_route_only_with_its_flag():
    """The proxy above stands for a server started without the flag: in vLLM's own code
    (the pinned CPU build), the flag is what registers ``/tokenizer_info`` at all."""
    if (reason := engine.vllm_installed()) is not None:
        engine.unavailable(reason)
    python = engine.engine_python()
    done = subprocess.run(
        [python, "-c", ROUTES], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False", "True", "True"]
