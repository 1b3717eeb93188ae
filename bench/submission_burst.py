"""Benchmark: readers' latency while a burst of job submissions is planned.

Run: .venv/bin/python bench/submission_burst.py [--submissions 50] [--readers 8]
        [--method adadpsyn] [--server-env DPSYN_PLANNING_CONCURRENCY=0] [--json out.json]

It starts ``dpsyn serve`` on 127.0.0.1 with an admin key: SQLite in a temporary data
directory, and jobs queued for Celery on ``--broker`` (a Redis database of its own that no
worker reads, so no job runs and no model loads beside the API: what is measured is admission
alone; the rate limits use that Redis too). It uploads the first ``--records`` TREC training
questions (``../shared/data``) through the API, gives them a budget large enough for every
submission, and stores a prompt set and a ``prompts:read`` key directly in the database for
the readers. Then:

1. baseline: ``--readers`` keep-alive clients GET ``/v1/prompts/{id}`` for ``--baseline``
   seconds, alone;
2. burst: the same readers keep reading while ``--submissions`` ``POST /v1/jobs`` are sent at
   once (each on its own connection; every job is a real one: planned, its cost reserved,
   queued), until every submission is answered. Their epsilons differ slightly (1.000, 1.001,
   ...), so each is planned afresh rather than from the planner's caches (``--same`` sends
   one job 50 times).

It prints, for both phases, the readers' requests, statuses and p50/p99 latency, and for the
burst the submissions' statuses and how long the last one took. At the end the queued tasks
are deleted from ``--broker`` (the queue's own keys only). Verdict: no reader got a 5xx, and
no submission a 503 (they wait in the planning lane, whose queue holds
``DPSYN_PLANNING_QUEUE``); exit status 1 when that is missed. ``--server-env
DPSYN_PLANNING_CONCURRENCY=0`` runs without the lane (every submission then queues for a
request slot like a reader: the behaviour before issue 21).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import free_port, start_server, stop_server  # noqa: E402
from prompt_latency import seed  # noqa: E402

from app.db.migrate import upgrade  # noqa: E402
from app.db.session import get_engine  # noqa: E402
from workers.celery_app import DEFAULT_QUEUE  # noqa: E402

HOST = "127.0.0.1"
ADMIN_KEY = "bench-submission-burst-admin-key-0123456789"
TREC = ROOT.parent / "shared" / "data" / "trec" / "train.txt"


@dataclass
class Phase:
    """What the readers saw in one phase."""

    name: str
    latencies: list[float] = field(default_factory=list)  # seconds, every answer
    statuses: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # client-side failures, by type

    def quantile_ms(self, q: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def as_dict(self) -> dict:
        return {
            "phase": self.name,
            "requests": len(self.latencies),
            "statuses": dict(self.statuses),
            "client_errors": dict(self.errors),
            "p50_ms": self.quantile_ms(0.50),
            "p99_ms": self.quantile_ms(0.99),
        }


def trec_records(n: int) -> list[dict[str, str]]:
    """The first ``n`` TREC training questions, with their coarse labels."""
    records = []
    with TREC.open(encoding="latin-1") as lines:
        for line in lines:
            label, _, text = line.strip().partition(" ")
            records.append({"text": text, "label": label.split(":")[0]})
            if len(records) == n:
                break
    return records


def funded_dataset(base: str, records: int, submissions: int) -> str:
    """A TREC dataset uploaded through the API, with room in its budget for every job."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        upload = http.post("/v1/datasets", json={"task": "trec", "records": trec_records(records)})
        upload.raise_for_status()
        dataset_id = str(upload.json()["id"])
        budget = http.put(
            f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 2.0 * submissions + 10}
        )
        budget.raise_for_status()
    return dataset_id


async def read_until(http: httpx.AsyncClient, path: str, phase: Phase, stop: asyncio.Event):
    while not stop.is_set():
        start = time.monotonic()
        try:
            response = await http.get(path)
        except httpx.HTTPError as err:
            phase.errors[type(err).__name__] += 1
            continue
        phase.latencies.append(time.monotonic() - start)
        phase.statuses[response.status_code] += 1
        if response.status_code >= 500:
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))


async def readers(base: str, path: str, key: str, phase: Phase, n: int, stop: asyncio.Event):
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        await asyncio.gather(*(read_until(http, path, phase, stop) for _ in range(n)))


async def submit(base: str, body: dict) -> tuple[int, float, str]:
    """One submission on its own connection: status, seconds, and the error code if any."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    start = time.monotonic()
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=600) as http:
        try:
            response = await http.post("/v1/jobs", json=body)
        except httpx.HTTPError as err:
            return 0, time.monotonic() - start, type(err).__name__
    code = "" if response.status_code < 400 else response.json()["error"]["code"]
    return response.status_code, time.monotonic() - start, code


async def run(base: str, path: str, key: str, bodies: list, args) -> tuple[Phase, Phase, list]:
    baseline, burst = Phase("alone"), Phase("during the burst")
    stop = asyncio.Event()
    reading = asyncio.create_task(readers(base, path, key, baseline, args.readers, stop))
    await asyncio.sleep(args.baseline)
    stop.set()
    await reading
    stop = asyncio.Event()
    reading = asyncio.create_task(readers(base, path, key, burst, args.readers, stop))
    await asyncio.sleep(0.5)
    answers = await asyncio.gather(*(submit(base, body) for body in bodies))
    stop.set()
    await reading
    return baseline, burst, list(answers)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def report(phases: list[Phase], answers: list, label: str) -> list[str]:
    print(f"\nGET /v1/prompts/{{id}} while {len(answers)} job submissions arrive at once, {label}")
    print(f"{'readers':>18} {'requests':>8} {'p50 ms':>7} {'p99 ms':>7}  statuses / client errors")
    for phase in phases:
        d = phase.as_dict()
        statuses = " ".join(f"{k}:{v}" for k, v in sorted(d["statuses"].items()))
        errors = " ".join(f"{k}:{v}" for k, v in d["client_errors"].items())
        print(f"{phase.name:>18} {d['requests']:>8} {fmt(d['p50_ms']):>7} "
              f"{fmt(d['p99_ms']):>7}  {statuses} {errors}")  # fmt: skip
    statuses = Counter(status for status, _, _ in answers)
    codes = Counter(code for _, _, code in answers if code)
    times = sorted(seconds for _, seconds, _ in answers)
    print(f"submissions: {dict(sorted(statuses.items()))} {dict(codes) or ''}")
    print(f"submission answered after: first {times[0]:.1f} s, median "
          f"{times[len(times) // 2]:.1f} s, last {times[-1]:.1f} s")  # fmt: skip
    misses = []
    reader_5xx = sum(v for k, v in phases[-1].statuses.items() if k >= 500)
    if reader_5xx or phases[-1].errors:
        misses.append(f"readers during the burst: {reader_5xx} 5xx, {dict(phases[-1].errors)}")
    if statuses[503] or statuses[0]:
        misses.append(f"submissions: {statuses[503]} 503, {statuses[0]} client errors")
    return misses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=50)
    parser.add_argument("--readers", type=int, default=8, help="concurrent reading clients")
    parser.add_argument("--baseline", type=float, default=5.0, help="seconds of reading alone")
    parser.add_argument("--method", default="adadpsyn", help="the jobs' method (default params)")
    parser.add_argument("--records", type=int, default=1000, help="TREC records uploaded")
    parser.add_argument("--same", action="store_true", help="one job, sent every time")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--broker",
        default="redis://127.0.0.1:6379/15",
        help="the Redis the jobs are queued on (the queue's keys are deleted at the end)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="DPSYN_X=V",
        help="a setting for the server (e.g. DPSYN_PLANNING_CONCURRENCY=1); repeatable",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpsyn-burst-") as tmp:
        data_dir = Path(tmp)
        url = f"sqlite:///{data_dir / 'dpsyn.db'}"
        upgrade(url)
        prompt_id, key = seed(url)
        get_engine(url).dispose()
        port = free_port()
        base = f"http://{HOST}:{port}"
        with open(data_dir / "server.log", "w+b") as log:
            extra = dict(item.split("=", 1) for item in args.server_env)
            extra.update(DPSYN_BOOTSTRAP_API_KEY=ADMIN_KEY, DPSYN_BROKER_URL=args.broker)
            server = start_server(data_dir, None, port, log, extra)
            try:
                dataset_id = funded_dataset(base, args.records, args.submissions)
                bodies = [
                    {
                        "dataset_id": dataset_id,
                        "method": args.method,
                        "epsilon": 1.0 if args.same else round(1.0 + i / 1000, 3),
                    }
                    for i in range(args.submissions)
                ]
                path = f"/v1/prompts/{prompt_id}"
                baseline, burst, answers = asyncio.run(run(base, path, key, bodies, args))
            finally:
                stop_server(server)
                queue_keys = [f"{k}{DEFAULT_QUEUE}" for k in ("", "_kombu.binding.")]
                queue_keys.append(f"_kombu.binding_permanent.{DEFAULT_QUEUE}")
                redis.Redis.from_url(args.broker).delete(*queue_keys)
            log.seek(0)
            tracebacks = log.read().count(b"Traceback")
    label = f"method {args.method}" + "".join(f" {item}" for item in args.server_env)
    misses = report([baseline, burst], answers, label)
    print(f"server log: {tracebacks} tracebacks")
    if args.json:
        figures = {"phases": [baseline.as_dict(), burst.as_dict()], "submissions": answers}
        args.json.write_text(json.dumps(figures, indent=1))
    for miss in misses:
        print(f"MISS: {miss}")
    print("OK: no reader 5xx, no submission 503" if not misses else "FAILED")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
