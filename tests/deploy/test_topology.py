"""The docker-compose topology as local processes, started from docker-compose.yml itself.

Each dpsyn service's ``command`` and ``environment`` are read from the compose file (after the
same interpolation as ``tests/deploy/test_compose.py``); only what a container network gives
differs: the host names ``postgres`` and ``redis`` become a database of its own on the test
PostgreSQL and a throwaway Redis (so that no other test's worker takes our tasks), ``vllm-cpu``
the test session's real vLLM server, and each API replica gets a loopback port (the image's
``DPSYN_HOST``/``DPSYN_PORT``).

The default profile: ``migrate`` once, then two ``api`` replicas
(``DPSYN_MIGRATE_ON_START=false``) and two ``worker`` processes on the test suite's fake
backend (a test hook refused in production, so those workers alone run as development). One
job submitted through the first API runs once, on one worker, and is read back through the
second. The ``cpu-engine`` profile: the API and a ``worker-cpu-engine``, in production, on the
real engine: an AdaDPSyn job, ``/complete`` on its prompt, and a PromptPATE job.
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
from app.synthesis.tasks import BUILTIN_TASKS
from tests.conftest import PG_HOST, PG_PORT, _admin_url, require_service
from tests.deploy.test_compose import ENV_EXAMPLE, FILLED, load, read_env_file
from tests.workers.processes import OwnRedis, free_port, http_ok, wait_for

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
    return http_ok(f"{url}/healthz")


def compose_services(**settings: str) -> dict:
    """The compose file's services, interpolated from .env.example, FILLED and ``settings``."""
    return load({**read_env_file(ENV_EXAMPLE), **FILLED, **settings})["services"]


def environment(
    services: dict, name: str, database: str, broker: str, hosts: dict[str, str], **extra: str
) -> dict[str, str]:
    """A compose service's environment on local hosts: its database and broker become the
    test's, and each ``http://HOST:PORT`` of ``hosts`` (a compose service) the local URL."""
    env = {k: str(v) for k, v in services[name]["environment"].items()}
    assert env["DPSYN_DATABASE_URL"].endswith("@postgres:5432/dpsyn"), name
    assert env["DPSYN_BROKER_URL"] == "redis://redis:6379/0", name
    env["DPSYN_DATABASE_URL"], env["DPSYN_BROKER_URL"] = database, broker
    for key, value in env.items():
        for compose_url, local_url in hosts.items():
            if value == compose_url:
                env[key] = local_url
    outside = {k: v for k, v in os.environ.items() if not k.startswith(("DPSYN_", "PYTHONPATH"))}
    return {**outside, **env, "PYTHONPATH": str(ROOT), **extra}


def run_migrate(services: dict, database: str, broker: str, tmp_path: Path) -> None:
    """The one-shot ``migrate`` service, which must exit 0 (service_completed_successfully)."""
    migrate_env = environment(services, "migrate", database, broker, {})
    assert migrate_env["DPSYN_ENVIRONMENT"] == "production"
    migrate = Service(services["migrate"], [], migrate_env, tmp_path / "migrate.log")
    assert migrate.process.wait(timeout=120) == 0, migrate.text()
    assert f"at revision {head_revision()}" in migrate.text()
    assert current_revision(database) == head_revision()


def start_apis(services: dict, env_of, count: int, tmp_path: Path, running: list) -> list[str]:
    """``count`` API replicas on loopback ports (the image's DPSYN_HOST/DPSYN_PORT)."""
    urls = []
    for i in range(1, count + 1):
        port = free_port()
        env = env_of("api", DPSYN_HOST="127.0.0.1", DPSYN_PORT=str(port))
        assert env["DPSYN_MIGRATE_ON_START"] == "false"
        running.append(Service(services["api"], [], env, tmp_path / f"api{i}.log"))
        urls.append(f"http://127.0.0.1:{port}")
    for api, url in zip(running[-count:], urls, strict=True):
        wait_for(lambda api=api, url=url: _answers(api, url), 60, api.log.stem, api.log)
    return urls


def start_workers(
    services: dict, name: str, env: dict[str, str], count: int, tmp_path: Path, running: list
) -> list[Service]:
    """``count`` workers of compose service ``name``, waited for until Celery is ready."""
    workers = [
        Service(services[name], ["--hostname", f"worker{i}@%h"], env, tmp_path / f"worker{i}.log")
        for i in range(1, count + 1)
    ]
    running.extend(workers)
    for worker in workers:

        def ready(worker: Service = worker) -> bool:
            worker.alive()
            return "ready." in worker.text()

        wait_for(ready, 120, worker.log.stem, worker.log)
    return workers


def wait_job(client: httpx.Client, job_id: str, timeout: float, log: Path) -> dict:
    """The job once it has finished (succeeded, failed or cancelled)."""

    def finished() -> bool:
        status = client.get(f"/v1/jobs/{job_id}").json()["status"]
        return status in {"succeeded", "failed", "cancelled"}

    wait_for(finished, timeout, "the job to finish", log)
    return client.get(f"/v1/jobs/{job_id}").json()


def submit_adadpsyn(client: httpx.Client, params: dict) -> tuple[str, str]:
    """Upload the TREC rows, set a budget, submit an AdaDPSyn job: (dataset, job) IDs."""
    created = client.post("/v1/datasets", json={"task": "trec", "records": TREC_ROWS})
    assert created.status_code == 201, created.text
    dataset = created.json()["id"]
    assert client.put(f"/v1/datasets/{dataset}/budget", json={"epsilon": 14}).status_code == 200
    submitted = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset, "method": "adadpsyn", "epsilon": 8, "shots": 2,
              "params": params},
    )  # fmt: skip
    assert submitted.status_code == 201, submitted.text
    return dataset, submitted.json()["id"]


def test_compose_topology_as_processes_runs_one_job(empty_database, redis, tmp_path):
    services = compose_services()

    def env_of(name: str, **extra: str) -> dict[str, str]:
        return environment(services, name, empty_database, redis, {}, **extra)

    run_migrate(services, empty_database, redis, tmp_path)
    running: list[Service] = []
    try:
        urls = start_apis(services, env_of, 2, tmp_path, running)
        worker_env = env_of(
            "worker",
            DPSYN_ENVIRONMENT="development",
            DPSYN_TEST_FAKE_BACKEND="1",
            DPSYN_WORKER_ALIVE_FILE=str(tmp_path / "alive"),
        )
        workers = start_workers(services, "worker", worker_env, 2, tmp_path, running)
        headers = {"Authorization": f"Bearer {KEY}"}
        first = httpx.Client(base_url=urls[0], headers=headers, timeout=30)
        second = httpx.Client(base_url=urls[1], headers=headers, timeout=30)
        dataset, job_id = submit_adadpsyn(first, {"M": 4, "N": 2, "tmax": 4, "K": 10})
        job = wait_job(second, job_id, 60, workers[0].log)
        assert job["status"] == "succeeded", job
        prompt = second.get(f"/v1/prompts/{job['prompt_id']}")
        assert prompt.status_code == 200 and prompt.json()["job_id"] == job_id
        budget = second.get(f"/v1/datasets/{dataset}/budget").json()
        history = budget["history"]
        [release] = budget["count_releases"]  # drawn for the job's plan, charged once
        assert [(e["kind"], e["job_id"]) for e in history] == [
            ("counts", release["id"]),
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


PUBLIC_ROWS = [{"text": f"public question number {i} about the weather ?"} for i in range(30)]


def test_the_cpu_engine_topology_runs_jobs_and_complete_on_a_real_vllm(
    empty_database, redis, vllm_server, tmp_path
):
    """Profile cpu-engine with the real engine: the API (/complete on vLLM) and a
    ``worker-cpu-engine`` run an AdaDPSyn and a PromptPATE job against vLLM."""
    services = compose_services(
        COMPOSE_PROFILES="cpu-engine",
        DPSYN_API_BACKEND="vllm",
        DPSYN_API_VLLM_URL="http://vllm-cpu:8000",
        DPSYN_VLLM_MODEL=vllm_server.served_name,
    )
    engine = {"http://vllm-cpu:8000": vllm_server.url}

    def env_of(name: str, **extra: str) -> dict[str, str]:
        return environment(services, name, empty_database, redis, engine, **extra)

    run_migrate(services, empty_database, redis, tmp_path)
    running: list[Service] = []
    try:
        api_env = env_of("api")
        assert api_env["DPSYN_BACKEND"] == "vllm" and api_env["DPSYN_VLLM_URL"] == vllm_server.url
        urls = start_apis(services, env_of, 1, tmp_path, running)
        worker_env = env_of("worker-cpu-engine", DPSYN_WORKER_ALIVE_FILE=str(tmp_path / "alive"))
        assert worker_env["DPSYN_ENVIRONMENT"] == "production"  # no test hook: the real engine
        assert worker_env["DPSYN_BACKEND"] == "vllm"
        assert worker_env["DPSYN_VLLM_URL"] == vllm_server.url
        (worker,) = start_workers(services, "worker-cpu-engine", worker_env, 1, tmp_path, running)
        # the start check asked the engine everything a job needs
        assert f"serves {vllm_server.served_name!r}: ready" in worker.text()
        client = httpx.Client(
            base_url=urls[0], headers={"Authorization": f"Bearer {KEY}"}, timeout=120
        )

        dataset, job_id = submit_adadpsyn(client, {"M": 4, "N": 1, "tmax": 6, "K": 20})
        job = wait_job(client, job_id, 300, worker.log)
        assert job["status"] == "succeeded", (job, worker.text()[-3000:])
        prompt = client.get(f"/v1/prompts/{job['prompt_id']}").json()
        assert prompt["model"] == vllm_server.served_name, prompt
        # a real job's noise may leave a demonstration empty, one word or a label's name: it
        # is then left out and the job's stats and the prompt's notes say so (issues 33, 43)
        stats = job.get("stats") or {}
        dropped = sum(stats.get(f"{why}_demonstrations", 0) for why in ("empty", "short", "echo"))
        assert len(prompt["demonstrations"]) + dropped == 2, (prompt, job.get("stats"))
        assert bool(prompt["notes"]) == bool(dropped), prompt["notes"]
        answer = client.post(
            f"/v1/prompts/{job['prompt_id']}/complete",
            json={"query": "What is the capital of Australia ?"},
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        labels = set(BUILTIN_TASKS["trec"].labels)
        assert body["label"] in labels and set(body["scores"]) == labels
        assert sum(body["scores"].values()) == pytest.approx(1.0)

        public = client.post("/v1/datasets", json={"public": True, "records": PUBLIC_ROWS})
        assert public.status_code == 201, public.text
        submitted = client.post(
            "/v1/jobs",
            json={"dataset_id": dataset, "method": "promptpate", "epsilon": 1.5, "shots": 2,
                  "public_dataset_id": public.json()["id"],
                  "params": {"teachers": 4, "queries": 20, "candidates": 2, "group_size": 8}},
        )  # fmt: skip
        assert submitted.status_code == 201, submitted.text
        pate = wait_job(client, submitted.json()["id"], 300, worker.log)
        assert pate["status"] == "succeeded", (pate, worker.text()[-3000:])
        client.close()
        # healthy after the jobs: the reaper and the lease heartbeat keep the file fresh
        health = subprocess.run(
            [sys.executable, "-c", "from app.cli import main; main()", "worker-health"],
            env=worker_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert health.returncode == 0, health.stderr
    finally:
        for service in running:
            service.close()
    for log in [*tmp_path.glob("*.log"), vllm_server.log]:
        assert "secret_" not in log.read_text(errors="replace"), log.name
