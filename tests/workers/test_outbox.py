"""No job stays ``queued`` for good: the API killed inside ``submit_job``, Redis flushed.

Real processes throughout: two ``dpsyn worker`` processes (Celery, a Redis of this module's
own, the slowed fake backend, about 3 s a job), a PostgreSQL database of this module's own
(dispatchers re-send *every* stale queued job of their database, so this keeps them off the
jobs other tests leave queued), and the API either in this process (``TestClient``) or as a
uvicorn process of its own that stops dead at one point of ``submit_job`` and is SIGKILLed
there (``tests/workers/paused_api.py``). The re-send bound is 1 s
(``DPSYN_REDISPATCH_AFTER_S``), so a stranded job is sent again within about a second.

Every job that was committed ends ``succeeded`` after exactly one attempt, with one prompt
set and one ``reserve`` + ``commit`` in the ledger, however many copies of its task were sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select, text

from app.db.models import Job, JobStatus, LedgerEntry
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.conftest import PG_HOST, PG_PORT, _admin_url, require_service
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job, ledger_kinds, prompt_sets
from tests.workers.processes import ROOT, OwnRedis, Worker, free_port, wait_for
from tests.workers.test_faults import HEADERS, KEY, trec_rows, wait_until_reading, worker_env
from workers.celery_app import DEFAULT_QUEUE, CeleryQueue, make_celery

pytestmark = pytest.mark.distributed

BOUND = {"DPSYN_REDISPATCH_AFTER_S": "1"}
JOB = {
    "method": "adadpsyn",
    "epsilon": 2,
    "shots": 2,
    "params": {"M": 4, "N": 2, "tmax": 4, "K": 10},
}


def fresh_database() -> Iterator[str]:
    """A migrated PostgreSQL database of the caller's own, dropped afterwards."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    from app.db.migrate import upgrade
    from app.db.session import get_engine

    name = f"dpsyn_outbox_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = _admin_url(name)
    try:
        upgrade(url)
        yield url
    finally:
        get_engine(url).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from fresh_database()


@pytest.fixture(scope="module")
def broker() -> Iterator[OwnRedis]:
    own = OwnRedis()
    try:
        yield own
    finally:
        own.close()


@pytest.fixture(scope="module")
def queue_name() -> str:
    return f"dpsyn-outbox-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def workers(database, broker, queue_name, tmp_path_factory) -> Iterator[list[Worker]]:
    """Two workers on the module's queue, re-sending stale queued jobs after 1 s."""
    logs = tmp_path_factory.mktemp("outbox-workers")
    env = worker_env(database, broker.url, **BOUND)
    started: list[Worker] = []
    try:
        for name in ("first", "second"):
            started.append(Worker(logs / f"{name}.log", queue_name, env))
        yield started
    finally:
        for worker in started:
            worker.close()
    for worker in started:
        assert "secret_" not in worker.text()


def logs(workers: list[Worker]) -> str:
    return "\n".join(worker.text() for worker in workers)


def create_dataset(client: httpx.Client | TestClient) -> str:
    created = client.post(
        "/v1/datasets", json={"task": "trec", "records": trec_rows()}, headers=HEADERS
    )
    assert created.status_code == 201, created.text
    dataset = created.json()["id"]
    budget = client.put(f"/v1/datasets/{dataset}/budget", json={"epsilon": 10}, headers=HEADERS)
    assert budget.status_code == 200, budget.text
    return dataset


def jobs_of(url: str, dataset: str) -> list[Job]:
    with session_scope(url) as session:
        return list(session.scalars(select(Job).where(Job.dataset_id == dataset)))


def ledger_of(url: str, dataset: str) -> list[str]:
    with session_scope(url) as session:
        return list(
            session.scalars(select(LedgerEntry.kind).where(LedgerEntry.dataset_id == dataset))
        )


def assert_ran_once(url: str, job_id: str) -> None:
    """Succeeded after one attempt; one prompt set; reserved once, charged once."""
    job = get_job(url, job_id)
    assert job.status == JobStatus.SUCCEEDED, (job.status, job.error)
    assert job.attempts == 1
    assert len(prompt_sets(url, job_id)) == 1
    assert ledger_kinds(url, job_id) == ["reserve", "commit"]


def wait_succeeded(url: str, job_ids: list[str], workers: list[Worker], timeout: float) -> None:
    def done() -> bool:
        return all(get_job(url, job_id).status in {"succeeded", "failed"} for job_id in job_ids)

    wait_for(done, timeout, f"jobs {job_ids} to finish", workers[0].log)
    for job_id in job_ids:
        assert_ran_once(url, job_id)


def queued_messages(broker: OwnRedis, queue: str) -> int:
    """Tasks waiting in the broker's list for ``queue``."""
    client = redis.Redis.from_url(broker.url)
    try:
        return int(client.llen(queue))
    finally:
        client.close()


def flush(broker: OwnRedis) -> None:
    """FLUSHALL: the broker loses every task, as a Redis restarted without persistence."""
    client = redis.Redis.from_url(broker.url)
    try:
        client.flushall()
    finally:
        client.close()


class PausedApi:
    """``tests/workers/paused_api.py`` as a process: the API that stops at ``point``."""

    def __init__(self, log: Path, point: str, env: dict[str, str]) -> None:
        self.port, self.log, self.marker = free_port(), log, log.with_suffix(".paused")
        command = [sys.executable, "-m", "tests.workers.paused_api", str(self.port), point,
                   str(self.marker)]  # fmt: skip
        with log.open("w") as out:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        wait_for(self._up, 30, "the API process to start", log)

    def _up(self) -> bool:
        try:
            return self.client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def submit_and_kill(self, dataset: str) -> None:
        """POST a job; SIGKILL the process once the request reached its pause point."""
        outcome: list[object] = []

        def post() -> None:
            try:
                outcome.append(self.client.post("/v1/jobs", json={"dataset_id": dataset, **JOB},
                                                headers=HEADERS))  # fmt: skip
            except httpx.TransportError as err:
                outcome.append(err)

        request = threading.Thread(target=post, daemon=True)
        request.start()
        wait_for(self.marker.exists, 30, "the submission to reach its pause point", self.log)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        request.join(timeout=30)
        assert len(outcome) == 1 and isinstance(outcome[0], httpx.TransportError), outcome

    def close(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.mark.parametrize("point", ["before_commit", "before_enqueue", "after_enqueue"])
def test_an_api_killed_inside_submit_job_strands_no_job(
    point, database, broker, queue_name, workers, tmp_path
):
    env = {
        "DPSYN_DATABASE_URL": database,
        "DPSYN_BROKER_URL": broker.url,
        "DPSYN_BOOTSTRAP_API_KEY": KEY,
        "DPSYN_TEST_QUEUE": queue_name,
        **BOUND,
    }
    api = PausedApi(tmp_path / "api.log", point, env)
    try:
        dataset = create_dataset(api.client)
        api.submit_and_kill(dataset)
    finally:
        api.close()
    assert "secret_" not in api.log.read_text()

    jobs = jobs_of(database, dataset)
    # The dataset's count release is drawn, charged and committed before the job is planned
    # (issue 41): it stays, charged once, whatever became of the submission.
    if point == "before_commit":  # the job's transaction died with the process
        assert jobs == [] and ledger_of(database, dataset) == ["counts"]
        return
    assert len(jobs) == 1
    assert jobs[0].dispatched_at is not None  # committed with its outbox mark
    wait_succeeded(database, [jobs[0].id], workers, timeout=30)
    assert sorted(ledger_of(database, dataset)) == ["commit", "counts", "reserve"]


def test_a_queued_job_whose_task_redis_lost_is_sent_again(database, broker, queue_name, workers):
    """The job waits in Redis because no worker takes it: both are stopped (SIGSTOP) before
    it is submitted, and past their 1 s blocking pop, so its task stays in the list (two
    busy workers made the wait by timing: CI's loaded machine finished a 2 s job first,
    2026-12-03). Redis loses it; once the workers run on, a dispatcher sends it again."""
    settings = Settings(database_url=database, broker_url=broker.url, bootstrap_api_key=KEY)
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    with TestClient(app) as client:
        dataset = create_dataset(client)
        for worker in workers:
            worker.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(2.5)  # kombu's BRPOP times out after 1 s: no pop is left waiting
            submitted = client.post("/v1/jobs", json={"dataset_id": dataset, **JOB},
                                    headers=HEADERS)  # fmt: skip
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            assert get_job(database, job_id).status == JobStatus.QUEUED
            assert queued_messages(broker, queue_name) == 1  # its task, waiting in Redis
            flush(broker)
            assert queued_messages(broker, queue_name) == 0
        finally:
            for worker in workers:
                worker.process.send_signal(signal.SIGCONT)
        wait_succeeded(database, [job_id], workers, timeout=40)
    text = logs(workers)
    assert f"job {job_id}: queued, its task last sent over 1 s ago; sent again" in text
    assert text.count(f"job {job_id}: started (attempt 1)") == 1
    assert sorted(ledger_of(database, dataset)) == ["commit", "counts", "reserve"]


#: The copy test's job: four times JOB's tokens (about 12 s), so that it still runs when the
#: copy reaches the other worker on a loaded machine (with JOB's 3 s the job once finished
#: first, and the copy then found it done: a different line, and a 20 s wait for this one).
LONG_JOB = {**JOB, "params": {**JOB["params"], "tmax": 16}}


def job_lines(workers: list[Worker], job_id: str) -> str:
    """Every worker's log lines about ``job_id``, for a failure's message."""
    return "\n".join(
        f"{worker.log.name}: {line}"
        for worker in workers
        for line in worker.text().splitlines()
        if job_id in line
    )


def test_a_copy_delivered_while_the_job_runs_leaves_it_alone(database, broker, queue_name, workers):
    # A job that waited longer than the bound was sent again: its first copy started it,
    # the second reaches the other worker mid-job.
    settings = Settings(database_url=database, broker_url=broker.url, bootstrap_api_key=KEY)
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    with TestClient(app) as client:
        dataset = create_dataset(client)
        job = {"dataset_id": dataset, **LONG_JOB}
        submitted = client.post("/v1/jobs", json=job, headers=HEADERS)
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        wait_until_reading(database, job_id, workers[0])
        queue.enqueue(job_id)
        deadline = time.monotonic() + 20
        while f"job {job_id}: running under the live lease" not in logs(workers):
            assert time.monotonic() < deadline, (
                f"the copy, after 20 s:\n{job_lines(workers, job_id)}"
            )
            time.sleep(0.1)
        assert get_job(database, job_id).status == JobStatus.RUNNING  # the copy came mid-job
        wait_succeeded(database, [job_id], workers, timeout=60)


@pytest.fixture
def own_database() -> Iterator[str]:
    yield from fresh_database()


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    own = OwnRedis()
    try:
        yield own
    finally:
        own.close()


def test_the_api_process_sends_again_what_redis_lost(own_database, own_redis, tmp_path):
    """The API's own queue (``make_queue``) re-sends: no worker runs while Redis is flushed,
    and the worker started afterwards never re-sends itself (a bound of an hour)."""
    url = own_database
    settings = Settings(
        database_url=url, broker_url=own_redis.url, bootstrap_api_key=KEY, redispatch_after_s=1
    )
    app = create_app(settings, backend_provider=StaticProvider(FakeBackend()))
    worker: Worker | None = None
    try:
        with TestClient(app) as client:
            dataset = create_dataset(client)
            submitted = client.post("/v1/jobs", json={"dataset_id": dataset, **JOB},
                                    headers=HEADERS)  # fmt: skip
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            assert queued_messages(own_redis, DEFAULT_QUEUE) >= 1
            sent = get_job(url, job_id).dispatched_at
            flush(own_redis)
            wait_for(lambda: queued_messages(own_redis, DEFAULT_QUEUE) >= 1, 10, "a re-send", None)
            assert get_job(url, job_id).dispatched_at > sent
            client_ = redis.Redis.from_url(own_redis.url)
            message = json.loads(client_.lindex(DEFAULT_QUEUE, 0))
            client_.close()
            assert job_id in message["headers"]["argsrepr"]
            env = worker_env(url, own_redis.url, DPSYN_REDISPATCH_AFTER_S="3600")
            worker = Worker(tmp_path / "worker.log", DEFAULT_QUEUE, env)
            wait_succeeded(url, [job_id], [worker], timeout=30)
    finally:
        app.state.queue.close()
        if worker is not None:
            worker.close()
