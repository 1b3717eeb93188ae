"""``dpsyn worker`` runs Celery without gossip, mingle and heartbeat events.

A solo-pool worker handles no broker event while it runs a job. With gossip on, it read the
heartbeats the other workers had sent during the job all at once afterwards, found them older
than Celery's 16 s drift bound, and logged "Substantial drift from ... may mean clocks are
out of sync" after every long job: a false alarm about the clocks, in every worker's log.
dpsyn needs none of these events (jobs come through the queue, health is the alive file,
cancellation is a database flag), so ``dpsyn worker`` turns them off.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app as cli
from app.db.models import JobStatus
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job
from tests.workers.processes import OwnRedis, Worker, wait_for
from tests.workers.test_faults import KEY, submit, wait_until_reading, worker_env
from workers.celery_app import CeleryQueue, make_celery

WITHOUT_EVENTS = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
CELERY_DRIFT_BOUND_S = 16  # celery.events.state.HEARTBEAT_DRIFT_MAX


class _Runtime:
    def __init__(self) -> None:
        self.argv: list[str] | None = None

    def worker_main(self, argv: list[str]) -> None:
        self.argv = argv


def test_dpsyn_worker_starts_celery_without_gossip_mingle_and_heartbeat(monkeypatch):
    runtime = _Runtime()
    monkeypatch.setenv("DPSYN_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("DPSYN_BACKEND", raising=False)
    monkeypatch.setattr("app.services.queue.load_runtime", lambda settings: runtime)
    done = CliRunner().invoke(cli, ["worker", "--queue", "q", "--hostname", "w@h"])
    assert done.exit_code == 0, done.output
    assert runtime.argv is not None
    assert runtime.argv[:2] == ["worker", "--pool=solo"]
    assert set(WITHOUT_EVENTS) <= set(runtime.argv), runtime.argv
    assert {"--queues=q", "--hostname=w@h", "--concurrency=1"} <= set(runtime.argv)


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    redis = OwnRedis()
    try:
        yield redis
    finally:
        redis.close()


@pytest.mark.distributed
def test_no_clock_drift_warning_after_a_long_job_beside_another_worker(
    postgres_url, own_redis, tmp_path
):
    queue_name = f"dpsyn-events-{uuid.uuid4().hex[:10]}"
    settings = Settings(database_url=postgres_url, broker_url=own_redis.url, bootstrap_api_key=KEY)
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    # 3 s a model call: a job of about 25 s, longer than Celery's drift bound
    env = worker_env(postgres_url, own_redis.url, DPSYN_TEST_FAKE_BACKEND_DELAY_S="3")
    workers: list[Worker] = []
    try:
        workers.append(Worker(tmp_path / "busy.log", queue_name, env))
        workers.append(Worker(tmp_path / "idle.log", queue_name, env))  # sends heartbeats
        with TestClient(app) as client:
            _, job_id = submit(client)
            busy = _running_worker(postgres_url, job_id, workers)
            started = time.monotonic()
            wait_for(
                lambda: get_job(postgres_url, job_id).status != JobStatus.RUNNING,
                90, "the job to finish", busy.log,
            )  # fmt: skip
            assert get_job(postgres_url, job_id).status == JobStatus.SUCCEEDED
            assert time.monotonic() - started > CELERY_DRIFT_BOUND_S  # the case that warned
        time.sleep(3)  # the busy worker reads what arrived during the job
        for worker in workers:
            assert "Substantial drift" not in worker.text(), worker.text()[-3000:]
    finally:
        for worker in workers:
            worker.close()


def _running_worker(url: str, job_id: str, workers: list[Worker]) -> Worker:
    """The worker that took the job (its log names the job once it is running)."""
    wait_until_reading(url, job_id, workers[0])
    taken = [worker for worker in workers if job_id in worker.text()]
    return taken[0] if taken else workers[0]
