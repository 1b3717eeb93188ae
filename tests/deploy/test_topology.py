"""The docker-compose topology as local processes, started from docker-compose.yml itself.

Each dpsyn service's ``command`` and ``environment`` are read from the compose file (after the
same interpolation as ``tests/deploy/test_compose.py``); only what a container network gives
differs: the host names ``postgres`` and ``redis`` become a database of its own on the test
PostgreSQL and a throwaway Redis (so that no other test's worker takes our tasks), and each
API replica gets a loopback port (the image's ``DPSYN_HOST``/``DPSYN_PORT``). Workers use the
test suite's fake backend instead of a model (a test hook refused in production, so workers
alone run as development). Order as compose has it: ``migrate`` once, then two ``api``
replicas (``DPSYN_MIGRATE_ON_START=false``) and two ``worker`` processes. One job submitted
through the first API runs once, on one worker, and is read back through the second.
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
from tests.deploy.test_compose import ENV_EXAMPLE, FILLED, load, read_env_file
from tests.workers.processes import OwnRedis, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
KEY = FILLED["DPSYN_BOOTSTRAP_API_KEY"]
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


class Service:
    """One dpsyn process of the topology: the compose service's command and environment."""

    def __init__(self, spec: dict, extra_args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        command = [sys.executable, "-c", "from app.cli import main; main()"]
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [*command, *spec["command"], *extra_args],
                cwd=log.parent,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text()

    def alive(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"{self.log.stem} exited ({self.process.returncode}):\n{self.text()}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _answers(service: Service, url: str) -> bool:
    service.alive()
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_compose_topology_as_processes_runs_one_job(empty_database, redis, tmp_path):
    services = load({**read_env_file(ENV_EXAMPLE), **FILLED})["services"]

    def environment(name: str, **extra: str) -> dict[str, str]:
        """The compose service's environment (env_file, then its own), on local hosts."""
        env = {**read_env_file(ENV_EXAMPLE), **FILLED, **services[name]["environment"]}
        database, broker = env["DPSYN_DATABASE_URL"], env["DPSYN_BROKER_URL"]
        assert database.endswith("@postgres:5432/dpsyn") and broker == "redis://redis:6379/0"
        env["DPSYN_DATABASE_URL"] = empty_database  # the service's database, here
        env["DPSYN_BROKER_URL"] = redis
        outside = {
            k: v for k, v in os.environ.items() if not k.startswith(("DPSYN_", "PYTHONPATH"))
        }
        return {**outside, **env, "PYTHONPATH": str(ROOT), **extra}

    migrate_env = environment("migrate")
    assert migrate_env["DPSYN_ENVIRONMENT"] == "production"
    migrate = Service(services["migrate"], [], migrate_env, tmp_path / "migrate.log")
    assert migrate.process.wait(timeout=120) == 0, migrate.text()  # service_completed_successfully
    assert f"at revision {head_revision()}" in migrate.text()
    assert current_revision(empty_database) == head_revision()

    running: list[Service] = []
    try:
        urls = []
        for i in (1, 2):
            port = free_port()
            env = environment("api", DPSYN_HOST="127.0.0.1", DPSYN_PORT=str(port))
            assert env["DPSYN_MIGRATE_ON_START"] == "false"
            running.append(Service(services["api"], [], env, tmp_path / f"api{i}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        workers = []
        for i in (1, 2):
            env = environment(
                "worker", DPSYN_ENVIRONMENT="development", DPSYN_TEST_FAKE_BACKEND="1"
            )
            workers.append(
                Service(
                    services["worker"],
                    ["--hostname", f"worker{i}@%h"],
                    env,
                    tmp_path / f"worker{i}.log",
                )
            )
        running.extend(workers)
        for api, url in zip(running[:2], urls, strict=True):
            wait_for(lambda api=api, url=url: _answers(api, url), 60, api.log.stem, api.log)
        for worker in workers:

            def ready(worker: Service = worker) -> bool:
                worker.alive()
                return "ready." in worker.text()

            wait_for(ready, 60, worker.log.stem, worker.log)

        headers = {"Authorization": f"Bearer {KEY}"}
        first = httpx.Client(base_url=urls[0], headers=headers, timeout=30)
        second = httpx.Client(base_url=urls[1], headers=headers, timeout=30)
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

        wait_for(finished, 60, "the job to finish", workers[0].log)
        job = second.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "succeeded", job
        prompt = second.get(f"/v1/prompts/{job['prompt_id']}")
        assert prompt.status_code == 200 and prompt.json()["job_id"] == job_id
        history = second.get(f"/v1/datasets/{dataset}/budget").json()["history"]
        assert [(e["kind"], e["job_id"]) for e in history] == [
            ("reserve", job_id),
            ("commit", job_id),
        ]
        ran = [w.log.stem for w in workers if "succeeded in" in w.text()]
        assert len(ran) == 1, [w.text()[-2000:] for w in workers]
        first.close()
        second.close()
    finally:
        for service in running:
            service.close()
    for log in tmp_path.glob("*.log"):
        assert "secret_" not in log.read_text(), log.name
