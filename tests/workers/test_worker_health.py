"""``dpsyn worker-health``: the workers' container healthcheck, on a real worker process.

Celery's ``inspect ping`` (the healthcheck before) cannot be answered by a solo-pool worker
while it runs a job, so every worker turned unhealthy during any long job. The alive file is
touched by the worker's reaper thread and its job's lease heartbeat instead: it stays fresh
through a job and grows old when the process stops (here: SIGSTOP, a hung worker).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.db.models import JobStatus
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job
from tests.workers.processes import ROOT, OwnRedis, Worker, wait_for
from tests.workers.test_faults import KEY, submit, wait_until_reading, worker_env
from workers.celery_app import CeleryQueue, make_celery

pytestmark = pytest.mark.distributed
MAX_AGE_S = 2.0  # the reaper and heartbeat run every 0.3 s here (SHORT_LEASE)


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    redis = OwnRedis()
    try:
        yield redis
    finally:
        redis.close()


def health(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``dpsyn worker-health`` as the container runs it, with the worker's environment."""
    return subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", "worker-health",
         "--max-age", str(MAX_AGE_S)],
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_healthy_through_a_job_unhealthy_when_the_worker_hangs(postgres_url, own_redis, tmp_path):
    queue_name = f"dpsyn-health-{uuid.uuid4().hex[:10]}"
    settings = Settings(database_url=postgres_url, broker_url=own_redis.url, bootstrap_api_key=KEY)
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    alive = tmp_path / "alive"
    # 1.5 s a model call: a job of well over ten seconds, many times MAX_AGE_S
    env = worker_env(
        postgres_url,
        own_redis.url,
        DPSYN_WORKER_ALIVE_FILE=str(alive),
        DPSYN_TEST_FAKE_BACKEND_DELAY_S="1.5",
    )
    without_file = health({**env, "DPSYN_WORKER_ALIVE_FILE": str(tmp_path / "none")})
    assert without_file.returncode != 0 and "does not exist" in without_file.stderr
    worker = Worker(tmp_path / "worker.log", queue_name, env)
    try:
        wait_for(alive.exists, 10, "the alive file", worker.log)
        with TestClient(app) as client:
            _, job_id = submit(client)
            wait_until_reading(postgres_url, job_id, worker)
            checks, started = 0, time.monotonic()
            while get_job(postgres_url, job_id).status == JobStatus.RUNNING:
                done = health(env)
                assert done.returncode == 0, done.stderr  # mid-job: still healthy
                checks += 1
                time.sleep(MAX_AGE_S)
            # healthy at each check, through a job that outlived the max age several times
            assert checks >= 2 and time.monotonic() - started > 3 * MAX_AGE_S
            assert get_job(postgres_url, job_id).status == JobStatus.SUCCEEDED

        worker.process.send_signal(signal.SIGSTOP)  # hung: no thread runs
        try:
            time.sleep(MAX_AGE_S + 1)
            stuck = health(env)
            assert stuck.returncode != 0 and "stuck" in stuck.stderr, stuck.stderr
        finally:
            worker.process.send_signal(signal.SIGCONT)
        wait_for(lambda: health(env).returncode == 0, 20, "health to come back", worker.log)
    finally:
        worker.close()
    assert "secret_" not in Path(worker.log).read_text()
