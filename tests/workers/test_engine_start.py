"""``dpsyn worker`` on the vllm backend checks its engine before it takes a job.

The backend reads the EOS token from vLLM's ``/tokenizer_info``, which answers 404 unless the
server was started with ``--enable-tokenizer-info-endpoint`` (compose's ``gpu`` profile
lacked it: every token-loop job failed, after it had been admitted and charged). Now the
worker asks the server everything a job needs when it starts and exits non-zero naming the
flag. The server here is real: ``scripts/vllm_serve.sh`` with the endpoint switched off again
(the last flag wins). The session's server pool starts it beside the shared server (a start
side by side costs little more than one) and it is stopped when this module is done.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import vllm_server as engine
from tests.workers.processes import ROOT, OwnRedis, free_port


@pytest.fixture(scope="module")
def server_without_tokenizer_info(vllm_pool) -> Iterator[engine.VLLMServer]:
    url = os.environ.get("DPSYN_TEST_VLLM_NO_INFO_URL")  # one already running, for speed
    if url:
        server = engine.VLLMServer(url, engine.MODEL, Path(os.devnull))
        engine.wait_healthy(server, 30)
        yield server
        return
    server = vllm_pool.get(engine.NO_TOKENIZER_INFO)
    try:
        yield server
    finally:
        vllm_pool.release(engine.NO_TOKENIZER_INFO)


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
    done = start_worker(server_without_tokenizer_info.url, broker, tmp_path)
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
