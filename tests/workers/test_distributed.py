"""Distributed mode end to end: PostgreSQL, Redis and a real, separate Celery worker process.

The job is submitted through the API (``create_app`` with a :class:`CeleryQueue`); the worker
runs ``python -m celery -A workers.celery_app worker`` on a queue of its own, with the fake
backend (``DPSYN_TEST_FAKE_BACKEND=1``, a test hook read only by ``workers.celery_app``). The
same task is sent again, as a redelivery would: the job runs once, stores one prompt set and
is charged once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job, ledger_kinds, prompt_sets
from workers.celery_app import CeleryQueue, make_celery

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.distributed


def wait_for(predicate, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = log.read_text()[-3000:] if log.exists() else "(no worker log)"
    pytest.fail(f"timed out waiting for {what}; worker log:\n{tail}")


@pytest.fixture
def worker(postgres_url, redis_url, tmp_path):
    """A Celery worker process on a fresh queue; yields (queue name, log file)."""
    queue = f"dpsyn-test-{uuid.uuid4().hex[:10]}"
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DPSYN_DATABASE_URL": postgres_url,
        "DPSYN_BROKER_URL": redis_url,
        "DPSYN_TEST_FAKE_BACKEND": "1",
        "DPSYN_REDISPATCH_AFTER_S": "3600",  # other tests' queued jobs in this database
        "PYTHONPATH": str(ROOT),
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_app",
        "worker",
        "--pool=solo",
        "--concurrency=1",
        "-Q",
        queue,
        "-n",
        f"{queue}@%h",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "ready." in log.read_text(), 30, "the worker to start", log)
        yield queue, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        import redis

        client = redis.Redis.from_url(redis_url)
        client.delete(queue)
        client.close()


KEY = "distributed-test-admin-key-0123456789abcdef"
TREC_ROWS = [
    {"text": f"secret_{code}_{i} what is it ?", "label": code}
    for code in ("ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM")
    for i in range(20)
]


def test_a_job_submitted_through_the_api_runs_once_on_a_separate_worker(
    postgres_url, redis_url, worker
):
    queue_name, log = worker
    settings = Settings(database_url=postgres_url, broker_url=redis_url, bootstrap_api_key=KEY)
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    headers = {"Authorization": f"Bearer {KEY}"}
    with TestClient(app) as client:
        created = client.post(
            "/v1/datasets", json={"task": "trec", "records": TREC_ROWS}, headers=headers
        )
        assert created.status_code == 201, created.text
        dataset = created.json()["id"]
        budget = client.put(f"/v1/datasets/{dataset}/budget", json={"epsilon": 10}, headers=headers)
        assert budget.status_code == 200, budget.text
        submitted = client.post(
            "/v1/jobs",
            json={
                "dataset_id": dataset,
                "method": "adadpsyn",
                "epsilon": 8,
                "shots": 2,
                "params": {"M": 4, "N": 2, "tmax": 4, "K": 10},
            },
            headers=headers,
        )
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        queue.enqueue(job_id)  # the same task delivered a second time

        def both_tasks_done() -> bool:
            return log.read_text().count("succeeded in") >= 2

        wait_for(both_tasks_done, 40, "both deliveries to be processed", log)
        job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        assert job["status"] == "succeeded", job
        assert job["progress"] == {"done": 8, "total": 8, "unit": "tokens"}
        assert job["prompt_id"]
        # the planner ran at admission on the API; its choice reached the job through the worker
        assert {"planner_T", "planner_checks", "planner_tang_sigma"} <= set(job["stats"])
        # this dataset's prompts (the tenant "default" is every bootstrap key's, and this
        # database is shared with the run's other PostgreSQL tests)
        listed = client.get("/v1/prompts", params={"dataset_id": dataset}, headers=headers)
        assert [p["job_id"] for p in listed.json()] == [job_id]
        history = client.get(f"/v1/datasets/{dataset}/budget", headers=headers).json()["history"]
        # the dataset's count release, drawn and charged once for the job's plan (issue 41)
        release = job["count_release_id"]
        assert release and [(e["kind"], e["job_id"]) for e in history] == [
            ("counts", release),
            ("reserve", job_id),
            ("commit", job_id),
        ]
    assert get_job(postgres_url, job_id).attempts == 1
    assert len(prompt_sets(postgres_url, job_id)) == 1
    assert ledger_kinds(postgres_url, job_id) == ["reserve", "commit"]
    text = log.read_text()
    assert "already succeeded; nothing to do" in text
    assert "secret_" not in text


def test_an_advice_run_is_queued_work_that_a_separate_worker_runs(postgres_url, redis_url, worker):
    """Distributed, the API never runs advice (issue 42): the Celery worker's runner claims
    the queued run from the database and finishes it; the row names that worker's process."""
    from app.db.models import AdviceRun
    from app.db.session import session_scope
    from tests.api.conftest import TOY_TASK

    queue_name, log = worker
    settings = Settings(database_url=postgres_url, broker_url=redis_url, bootstrap_api_key=KEY)
    assert not settings.api_runs_advice()
    queue = CeleryQueue(make_celery(settings), queue=queue_name)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    headers = {"Authorization": f"Bearer {KEY}"}
    rows = [{"text": f"ADVICE{i} two three", "label": ("w5", "w7")[i % 2]} for i in range(48)]
    with TestClient(app) as client:
        body = {"public": True, "labelled": True, "task": TOY_TASK, "records": rows}
        created = client.post("/v1/datasets", json=body, headers=headers)
        assert created.status_code == 201, created.text
        payload = {"dataset_id": created.json()["id"], "methods": ["tang"], "epsilons": [2.0],
                   "seeds": 2, "queries": 10, "shots": [2],
                   "params": {"tmax": 3, "K": 8, "M": 2, "N": 1}}  # fmt: skip
        started = client.post("/v1/advice", json=payload, headers=headers)
        assert started.status_code == 202, started.text
        advice_id = started.json()["id"]

        def done() -> bool:
            run = client.get(f"/v1/advice/{advice_id}", headers=headers).json()
            return run["status"] in ("succeeded", "failed")

        wait_for(done, 60, "the worker to run the advice", log)
        run = client.get(f"/v1/advice/{advice_id}", headers=headers).json()
        assert run["status"] == "succeeded", run
    with session_scope(postgres_url) as session:
        row = session.get(AdviceRun, advice_id)
        assert row is not None and row.owner is not None
        assert int(row.owner.split(":")[1]) != os.getpid()  # not this (the API's) process
