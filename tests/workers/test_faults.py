"""Jobs never stay ``running``: real worker processes killed, a real database stopped.

Each test runs ``dpsyn worker`` processes (Celery, a Redis of its own on a free port) with the
slowed fake backend (``DPSYN_TEST_FAKE_BACKEND_DELAY_S``) and lease settings of a second or
two, so that what takes a minute in production takes seconds here.

* A worker SIGKILLed mid-job: a second worker's reaper fails the job, charged (it had read the
  data); a redelivery of its task does nothing; its dataset can be deleted. The second worker
  is then killed too, and cancelling its job after the lease expired takes effect at once.
* PostgreSQL (a cluster of the test's own) stopped around the final write: the store retries
  and the job succeeds; stopped for longer than the retry budget: the attempt gives up, the
  lease expires, and once the database is back the reaper fails the job, charged.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from app.db.models import JobStatus
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job, ledger_kinds, make_dataset, make_job, prompt_sets
from tests.workers.processes import OwnPostgres, OwnRedis, Worker, wait_for
from workers.celery_app import CeleryQueue, make_celery

pytestmark = pytest.mark.distributed

KEY = "fault-test-admin-key-0123456789abcdef0123"
HEADERS = {"Authorization": f"Bearer {KEY}"}
TREC_ROWS = [
    {"text": f"secret_{code}_{i} what is it ?", "label": code}
    for code in ("ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM")
    for i in range(20)
]
_UPLOADS = itertools.count()


def trec_rows() -> list[dict[str, str]]:
    """TREC_ROWS with records of their own on each call (a number in the first word): a
    tenant's records uploaded again are refused (docs/privacy.md, "Budgets follow the
    records")."""
    n = next(_UPLOADS)
    return [{**row, "text": row["text"].replace(" ", f"_{n} ", 1)} for row in TREC_ROWS]


SHORT_LEASE = {
    "DPSYN_LEASE_DURATION_S": "2",
    "DPSYN_HEARTBEAT_INTERVAL_S": "0.3",
    "DPSYN_REAPER_INTERVAL_S": "0.3",
}


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    redis = OwnRedis()
    try:
        yield redis
    finally:
        redis.close()


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    from app.db.migrate import upgrade
    from app.db.session import get_engine

    postgres = OwnPostgres()
    try:
        postgres.start()
        upgrade(postgres.url)
        yield postgres
    finally:
        get_engine(postgres.url).dispose()
        postgres.close()


@pytest.fixture
def queue_name() -> str:
    return f"dpsyn-fault-{uuid.uuid4().hex[:10]}"


def worker_env(database_url: str, broker_url: str, **settings: str) -> dict[str, str]:
    return {
        "DPSYN_DATABASE_URL": database_url,
        "DPSYN_BROKER_URL": broker_url,
        "DPSYN_TEST_FAKE_BACKEND": "1",
        "DPSYN_TEST_FAKE_BACKEND_DELAY_S": "0.2",  # about 3 s per job
        # The database may be shared with other tests, whose queued jobs are not for these
        # workers' dispatchers to send (tests/workers/test_outbox.py uses a bound of 1 s).
        "DPSYN_REDISPATCH_AFTER_S": "3600",
        **SHORT_LEASE,
        **settings,
    }


def wait_until_reading(url: str, job_id: str, worker: Worker) -> None:
    """Until the job has read the private data and made progress (it is mid-mechanism)."""

    def reading() -> bool:
        job = get_job(url, job_id)
        return job.touched_data and job.progress_done >= 1

    wait_for(reading, 20, f"job {job_id} to read its data", worker.log)
    assert get_job(url, job_id).status == JobStatus.RUNNING


def submit(client: TestClient) -> tuple[str, str]:
    """A dataset with a budget and one job on it; returns (dataset ID, job ID)."""
    records = {"task": "trec", "records": trec_rows()}
    created = client.post("/v1/datasets", json=records, headers=HEADERS)
    assert created.status_code == 201, created.text
    dataset = created.json()["id"]
    budget = client.put(f"/v1/datasets/{dataset}/budget", json={"epsilon": 10}, headers=HEADERS)
    assert budget.status_code == 200, budget.text
    job = client.post(
        "/v1/jobs",
        json={
            "dataset_id": dataset,
            "method": "adadpsyn",
            "epsilon": 8,
            "shots": 2,
            "params": {"M": 4, "N": 2, "tmax": 4, "K": 10},
        },
        headers=HEADERS,
    )
    assert job.status_code == 201, job.text
    return dataset, job.json()["id"]


def test_a_killed_worker_s_job_is_failed_charged_and_stops_blocking(
    postgres_url, own_redis, queue_name, tmp_path
):
    settings = Settings(database_url=postgres_url, broker_url=own_redis.url, bootstrap_api_key=KEY)
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    env = worker_env(postgres_url, own_redis.url)
    workers: list[Worker] = []
    try:
        with TestClient(app) as client:
            first_dataset, first = submit(client)
            workers.append(Worker(tmp_path / "first.log", queue_name, env))
            wait_until_reading(postgres_url, first, workers[0])
            workers[0].kill()

            # Another worker's reaper finds the lease expired (2 s) and settles the job.
            second_worker = Worker(tmp_path / "second.log", queue_name, env)
            workers.append(second_worker)
            wait_for(
                lambda: get_job(postgres_url, first).status == JobStatus.FAILED,
                10,
                "the reaper to fail the killed worker's job",
                second_worker.log,
            )
            job = client.get(f"/v1/jobs/{first}", headers=HEADERS).json()
            assert "lease expired" in job["error"] and "charged" in job["error"], job
            assert ledger_kinds(postgres_url, first) == ["reserve", "commit"]  # it read the data

            # The task is delivered again (as after the visibility timeout): nothing happens.
            queue.enqueue(first)
            wait_for(
                lambda: f"job {first}: already failed; nothing to do" in second_worker.text(),
                10,
                "the redelivered task to be processed",
                second_worker.log,
            )
            assert get_job(postgres_url, first).attempts == 1
            assert ledger_kinds(postgres_url, first) == ["reserve", "commit"]
            assert prompt_sets(postgres_url, first) == []
            deleted = client.delete(f"/v1/datasets/{first_dataset}", headers=HEADERS)
            assert deleted.status_code == 200, deleted.text

            # No worker left to reap: cancelling a job whose lease expired still takes effect.
            second_dataset, second = submit(client)
            wait_until_reading(postgres_url, second, second_worker)
            second_worker.kill()

            def lease_expired() -> bool:
                expiry = get_job(postgres_url, second).lease_expires_at
                return expiry is not None and expiry < datetime.now(UTC)

            wait_for(lease_expired, 10, "the lease of the second job to expire", None)
            cancelled = client.post(f"/v1/jobs/{second}/cancel", headers=HEADERS)
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["status"] == "cancelled", cancelled.json()
            assert ledger_kinds(postgres_url, second) == ["reserve", "commit"]
            deleted = client.delete(f"/v1/datasets/{second_dataset}", headers=HEADERS)
            assert deleted.status_code == 200, deleted.text
    finally:
        for worker in workers:
            worker.close()
    for worker in workers:
        assert "secret_" not in worker.text()


def test_the_final_store_retries_through_a_database_outage(
    own_postgres, own_redis, queue_name, tmp_path
):
    url = own_postgres.url
    job_id = make_job(url, make_dataset(url))
    env = worker_env(
        url, own_redis.url, DPSYN_LEASE_DURATION_S="30", DPSYN_FINAL_STORE_RETRY_S="30"
    )
    worker = Worker(tmp_path / "worker.log", queue_name, env)
    try:
        CeleryQueue(make_celery(Settings(broker_url=own_redis.url)), queue=queue_name).enqueue(
            job_id
        )
        wait_until_reading(url, job_id, worker)
        own_postgres.stop()
        wait_for(
            lambda: f"job {job_id}: storing its outcome failed" in worker.text(),
            20,
            "the final store to meet the outage",
            worker.log,
        )
        own_postgres.start()
        wait_for(
            lambda: get_job(url, job_id).status == JobStatus.SUCCEEDED,
            20,
            "the job to succeed once the database is back",
            worker.log,
        )
    finally:
        worker.close()
    assert get_job(url, job_id).attempts == 1
    assert len(prompt_sets(url, job_id)) == 1
    assert ledger_kinds(url, job_id) == ["reserve", "commit"]
    assert "secret_" not in worker.text()


def test_an_outage_longer_than_the_retry_budget_is_settled_by_the_lease(
    own_postgres, own_redis, queue_name, tmp_path
):
    url = own_postgres.url
    job_id = make_job(url, make_dataset(url))
    worker = Worker(
        tmp_path / "worker.log",
        queue_name,
        worker_env(url, own_redis.url, DPSYN_FINAL_STORE_RETRY_S="1"),
    )
    try:
        CeleryQueue(make_celery(Settings(broker_url=own_redis.url)), queue=queue_name).enqueue(
            job_id
        )
        wait_until_reading(url, job_id, worker)
        own_postgres.stop()
        wait_for(
            lambda: f"job {job_id}: could not store its outcome" in worker.text(),
            20,
            "the final store to give up",
            worker.log,
        )
        own_postgres.start()
        wait_for(
            lambda: get_job(url, job_id).status == JobStatus.FAILED,
            10,
            "the reaper to settle the job once the database is back",
            worker.log,
        )
    finally:
        worker.close()
    job = get_job(url, job_id)
    assert "lease expired" in job.error and job.attempts == 1
    assert "failed with" not in worker.text()  # the attempt gave up once, as it was
    assert prompt_sets(url, job_id) == []
    assert ledger_kinds(url, job_id) == ["reserve", "commit"]  # it had read the data
    assert "secret_" not in worker.text()
