"""Benchmark: latency of GET /v1/prompts/{id} under load from a second process on loopback.

Run: .venv/bin/python bench/prompt_latency.py [--database-url URL] [--requests 4000]
        [--concurrency 16] [--workers 1]

It migrates a database (a fresh SQLite file by default; pass a PostgreSQL URL for the
distributed store), creates a tenant, a read-only prompts key and one stored prompt set
directly in the database, starts the API with uvicorn in a separate process on 127.0.0.1,
then sends the requests from this process with ``--concurrency`` threads (bounded in count
and time) and prints p50, p90, p99 and throughput. No model is loaded: reading a prompt
never touches one.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from app.db.models import Dataset, Job, KeyScope, PromptSet  # noqa: E402
from app.db.session import session_scope  # noqa: E402
from app.services.tenants import create_api_key, create_tenant  # noqa: E402


def seed(url: str) -> tuple[str, str]:
    """A prompt set and a read-only key that may read it."""
    with session_scope(url) as session:
        tenant, _ = create_tenant(session, f"bench-{time.time_ns()}")
        _, key = create_api_key(session, tenant.id, KeyScope.PROMPTS_READ)
        dataset = Dataset(
            tenant_id=tenant.id, name="bench", task={}, label_counts={"a": 1}, record_count=1
        )
        session.add(dataset)
        session.flush()
        job = Job(
            tenant_id=tenant.id, dataset_id=dataset.id, method="adadpsyn", config={},
            schedule=[], event={}, epsilon=8.0, delta=1e-4, status="succeeded",
        )  # fmt: skip
        session.add(job)
        session.flush()
        prompt = PromptSet(
            tenant_id=tenant.id, job_id=job.id, dataset_id=dataset.id, task={"name": "trec"},
            demonstrations=[{"label": "number", "text": "How many moons does Mars have ?"}] * 4,
            prompt="Classify the questions.\n\n" * 4, method="adadpsyn", model="bench",
            epsilon=8.0, delta=1e-4,
        )  # fmt: skip
        session.add(prompt)
        session.flush()
        return prompt.id, key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(url: str, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, "DPSYN_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--log-level", "warning", "--no-proxy-headers",  # as dpsyn serve: no proxy named
    ]  # fmt: skip
    server = subprocess.Popen(command, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not become healthy within 60 s")


def load(base: str, path: str, key: str, requests: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(requests))
    deadline = time.monotonic() + 300  # bounded in time as well as in count

    def worker() -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
            while time.monotonic() < deadline:
                with lock:
                    if next(counter, None) is None:
                        return
                start = time.perf_counter()
                response = client.get(path)
                elapsed = time.perf_counter() - start
                if response.status_code != 200:
                    raise SystemExit(f"GET {path}: HTTP {response.status_code}")
                with lock:
                    latencies.append(elapsed)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        upgrade(url)
        prompt_id, key = seed(url)
        port = free_port()
        server = start_server(url, port, args.workers)
        try:
            base = f"http://127.0.0.1:{port}"
            load(base, f"/v1/prompts/{prompt_id}", key, 200, args.concurrency)  # warm up
            started = time.perf_counter()
            latencies = load(base, f"/v1/prompts/{prompt_id}", key, args.requests,
                             args.concurrency)  # fmt: skip
            wall = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(timeout=30)
    ms = sorted(x * 1000 for x in latencies)
    q = statistics.quantiles(ms, n=100)
    store = "postgresql" if url.startswith("postgresql") else "sqlite"
    print(f"GET /v1/prompts/{{id}}  store={store}  requests={len(ms)}  "
          f"concurrency={args.concurrency}  server workers={args.workers}")  # fmt: skip
    print(f"p50 {q[49]:.2f} ms   p90 {q[89]:.2f} ms   p99 {q[98]:.2f} ms   "
          f"max {ms[-1]:.2f} ms   throughput {len(ms) / wall:.0f} req/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
