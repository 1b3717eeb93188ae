"""The docker-compose topology as local processes: PostgreSQL (a database of its own on the
test server), Redis (a throwaway one, so that no other test's worker takes our tasks), the
one-shot ``dpsyn migrate``, two API replicas started with ``DPSYN_MIGRATE_ON_START=false`` and
two ``dpsyn worker`` processes, all started with the environment docker-compose.yml gives
them (less the model: the workers use the test suite's fake backend). One job submitted
through the first API runs once, on one of the workers, and is read back through the second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from app.db.migrate import current_revision, head_revision
from tests.conftest import PG_HOST, PG_PORT, _admin_url, require_service
from tests.workers.processes import OwnRedis, Worker, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
KEY = "topology-test-bootstrap-key-0123456789abcdef"
TREC_ROWS = [
    {"text": f"secret_{code}_{i} what is it ?", "label": code}
    for code in ("ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM")
    for i in range(20)
]


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A new, empty database on the test PostgreSQL (``dpsyn migrate`` builds the schema)."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    name = f"dpsyn_topology_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield _admin_url(name)
    finally:
        from app.db.session import get_engine

        get_engine(_admin_url(name)).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def redis() -> Iterator[str]:
    own = OwnRedis()
    try:
        yield own.url
    finally:
        own.close()


def _dpsyn(*args: str) -> list[str]:
    return [sys.executable, "-c", "from app.cli import main; main()", *args]


class Api:
    """``dpsyn serve`` as an API replica, logging to ``log``."""

    def __init__(self, log: Path, env: dict[str, str], cwd: Path) -> None:
        self.log, self.port = log, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with log.open("w") as out:
            self.process = subprocess.Popen(
                _dpsyn("serve", "--port", str(self.port)),
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"{self.log.stem} exited:\n{self.log.read_text()[-4000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def test_compose_topology_as_processes_runs_one_job(empty_database, redis, tmp_path):
    # What docker-compose.yml gives every dpsyn service (x-dpsyn-env), with test values.
    base = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DPSYN_", "PYTHONPATH"))
    }
    env = {
        **base,
        "PYTHONPATH": str(ROOT),
        "DPSYN_DATABASE_URL": empty_database,
        "DPSYN_BROKER_URL": redis,
        "DPSYN_BOOTSTRAP_API_KEY": KEY,
    }
    migrate = subprocess.run(
        _dpsyn("migrate"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert migrate.returncode == 0, migrate.stderr
    assert f"at revision {head_revision()}" in migrate.stderr
    assert current_revision(empty_database) == head_revision()

    replica_env = {**env, "DPSYN_MIGRATE_ON_START": "false"}
    worker_env = {
        "DPSYN_TEST_FAKE_BACKEND": "1",
        **{k: v for k, v in env.items() if k.startswith("DPSYN_")},
    }
    apis: list[Api] = []
    workers: list[Worker] = []
    try:
        apis = [Api(tmp_path / f"api{i}.log", replica_env, tmp_path) for i in (1, 2)]
        workers = [Worker(tmp_path / f"worker{i}.log", "dpsyn", worker_env) for i in (1, 2)]
        for api in apis:
            wait_for(api.ready, 60, f"{api.log.stem} to answer /healthz", api.log)
        headers = {"Authorization": f"Bearer {KEY}"}
        first = httpx.Client(base_url=apis[0].url, headers=headers, timeout=30)
        second = httpx.Client(base_url=apis[1].url, headers=headers, timeout=30)
        created = first.post("/v1/datasets", json={"task": "trec", "records": TREC_ROWS})
        assert created.status_code == 201, created.text
        dataset = created.json()["id"]
        assert first.put(f"/v1/datasets/{dataset}/budget", json={"epsilon": 10}).status_code == 200
        submitted = first.post(
            "/v1/jobs",
            json={
                "dataset_id": dataset,
                "method": "adadpsyn",
                "epsilon": 8,
                "shots": 2,
                "params": {"M": 4, "N": 2, "tmax": 4, "K": 10},
            },
        )
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]

        def finished() -> bool:
            status = second.get(f"/v1/jobs/{job_id}").json()["status"]
            return status in {"succeeded", "failed", "cancelled"}

        logs = tmp_path / "worker1.log"
        wait_for(finished, 60, "the job to finish", logs)
        job = second.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "succeeded", job
        prompt = second.get(f"/v1/prompts/{job['prompt_id']}")
        assert prompt.status_code == 200 and prompt.json()["job_id"] == job_id
        history = second.get(f"/v1/datasets/{dataset}/budget").json()["history"]
        assert [(e["kind"], e["job_id"]) for e in history] == [
            ("reserve", job_id),
            ("commit", job_id),
        ]
        ran = [
            w.log.stem
            for w in workers
            if "Task dpsyn.run_job[" in w.text() and "succeeded in" in w.text()
        ]
        assert len(ran) == 1, [w.text()[-2000:] for w in workers]
        first.close()
        second.close()
    finally:
        for api in apis:
            api.close()
        for worker in workers:
            worker.close()
    for log in tmp_path.glob("*.log"):
        assert "secret_" not in log.read_text(), log.name
