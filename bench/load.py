"""Benchmark: GET /v1/prompts/{id} under 16 to 500 concurrent keep-alive clients.

Run: .venv/bin/python bench/load.py [--database-url postgresql+psycopg://postgres@HOST/postgres]
        [--levels 16,80,200,500] [--duration 12] [--honor-retry-after] [--no-ceiling]

It starts ``dpsyn serve`` (the embedded defaults: SQLite in a temporary data directory and an
in-process worker; with ``--database-url`` the server runs on a fresh database created on that
PostgreSQL server and dropped afterwards) on 127.0.0.1, stores one prompt set and a read-only
key directly in the database (no model is loaded: reading a prompt never touches one), and
then, for each concurrency level, runs that many keep-alive clients for ``--duration``
seconds (and at most ``--max-requests`` requests). Beside the load a probe asks ``/healthz``
every half second on a fresh connection. After each level it measures the recovery time: how
long until a single fresh request answers 200 again.

Per level it prints the requests, the throughput (all answers, and 2xx only), the status
counts, p50/p99 latency of admitted (2xx) requests, the health probes answered and the
recovery time. The verdict: at the highest level no 5xx other than 503 and no client errors,
every health probe answered 200, and throughput at the lowest level at least
``--min-throughput`` req/s. Exit status 1 when it misses.

The clients speak HTTP/1.1 over asyncio streams directly (a few lines, below) rather than
through a client library, so that on a small machine the load generator costs as little CPU
as possible next to the server it measures. By default they do NOT honour ``Retry-After``
(they send the next request at once, the worst case for the server);
``--honor-retry-after`` makes them wait as a well-behaved client does.

The ceiling (issue 23): in the same run, a second server started with the same uvicorn
settings serves one minimal FastAPI route that returns, from memory, the very JSON bytes the
prompt route answered (fetched from it once). Each level is run against the prompt route and
then, with the same client, against the ceiling, so both see the same machine load; the
report prints ``prompts/ceiling`` (2xx throughput) per level. On a shared 2-core machine only
ratios measured in one run are comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from app.db.migrate import upgrade  # noqa: E402
from app.db.session import get_engine  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from prompt_latency import seed  # noqa: E402

HOST = "127.0.0.1"


# -- a minimal HTTP/1.1 keep-alive client ---------------------------------------------------


class Connection:
    """One keep-alive connection; ``get`` sends a request and reads one whole response."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port = port
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(
        self, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        assert self.reader is not None
        extra = self.extra + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        request = f"GET {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n{extra}\r\n"
        self.writer.write(request.encode())
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            raise ValueError(f"HTTP {status} without Content-Length")
        body = await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def fetch_once(port: int, path: str, headers: dict[str, str], timeout: float):
    """One request on a fresh connection: ``(status or error name, seconds)``."""
    connection = Connection(port, headers)
    start = time.perf_counter()
    try:
        status, _, _ = await asyncio.wait_for(connection.get(path), timeout)
        return status, time.perf_counter() - start
    except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as error:
        return type(error).__name__, time.perf_counter() - start
    finally:
        connection.close()


# -- one load level ---------------------------------------------------------------------------


@dataclass
class Level:
    clients: int
    seconds: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  # of 2xx answers
    cut_off: int = 0  # requests still in flight when the level ended (after the drain)
    health: list[tuple[object, float]] = field(default_factory=list)
    recovery_s: float | None = None
    server_cpu_s: float = 0.0  # the server process's CPU time during the load

    @property
    def answers(self) -> int:
        return sum(self.statuses.values())

    def quantile(self, q: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    @property
    def bad_5xx(self) -> int:
        return sum(n for s, n in self.statuses.items() if s >= 500 and s != 503)

    @property
    def health_ok(self) -> bool:
        return bool(self.health) and all(status == 200 for status, _ in self.health)

    def as_dict(self) -> dict:
        return {
            "clients": self.clients,
            "seconds": round(self.seconds, 2),
            "answers": self.answers,
            "throughput": round(self.answers / self.seconds, 1) if self.seconds else 0,
            "throughput_2xx": round(len(self.latencies) / self.seconds, 1) if self.seconds else 0,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "client_errors": dict(self.errors),
            "cut_off": self.cut_off,
            "p50_ms": self.quantile(0.50),
            "p99_ms": self.quantile(0.99),
            "health_probes": len(self.health),
            "health_ok": sum(1 for s, _ in self.health if s == 200),
            "health_max_ms": max((t for _, t in self.health), default=0) * 1000,
            "recovery_s": self.recovery_s,
            "server_cpu_ms_per_answer": (
                round(self.server_cpu_s * 1000 / self.answers, 2) if self.answers else None
            ),
        }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux): a cost per request that, unlike the
    throughput, hardly depends on what else the machine is running."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: What a client asks next: (path, headers). One prompt and key, or the read mix (--mix).
Pick = Callable[[], tuple[str, dict[str, str]]]


def fixed(path: str, key: str) -> Pick:
    headers = {"Authorization": f"Bearer {key}"}
    return lambda: (path, headers)


async def run_level(port: int, pick: Pick, args, clients: int, pid: int) -> Level:
    level = Level(clients)
    cpu_before = cpu_seconds(pid)
    path, headers = pick()  # the recovery probe's request
    budget = {"left": args.max_requests}
    stop = asyncio.Event()

    async def client() -> None:
        connection = Connection(port, {})
        try:
            while not stop.is_set() and budget["left"] > 0:
                budget["left"] -= 1
                start = time.perf_counter()
                asked, sent = pick()
                try:
                    status, answer_headers, _ = await asyncio.wait_for(
                        connection.get(asked, sent), args.request_timeout
                    )
                except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as error:
                    level.errors[type(error).__name__] += 1
                    connection.close()
                    continue
                level.statuses[status] += 1
                if 200 <= status < 300:
                    level.latencies.append(time.perf_counter() - start)
                elif status == 503 and args.honor_retry_after:
                    retry = float(answer_headers.get("retry-after", "1"))
                    await asyncio.sleep(retry)
        finally:
            connection.close()

    async def probe() -> None:
        while not stop.is_set():
            tick = time.monotonic()
            level.health.append(await fetch_once(port, "/healthz", {}, args.health_timeout))
            await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - tick)))

    started = time.perf_counter()
    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    prober = asyncio.create_task(probe())
    await asyncio.wait(tasks, timeout=args.duration)
    stop.set()  # no new requests; those in flight may finish during the drain
    _, pending = await asyncio.wait(tasks, timeout=args.drain)
    level.seconds = time.perf_counter() - started
    level.server_cpu_s = cpu_seconds(pid) - cpu_before
    level.cut_off = len(pending)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, prober, return_exceptions=True)

    # Recovery: from the end of the load until one fresh request answers 200.
    ended = time.perf_counter()
    while time.perf_counter() - ended < args.recovery_limit:
        status, _ = await fetch_once(port, path, headers, 5.0)
        if status == 200:
            level.recovery_s = time.perf_counter() - ended
            break
        await asyncio.sleep(0.2)
    return level


# -- the server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(
    data_dir: Path, database_url: str | None, port: int, log, extra_env: dict[str, str]
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env.update({"PYTHONPATH": str(ROOT), "DPSYN_HOST": HOST, "DPSYN_PORT": str(port)})
    env.update(extra_env)
    if database_url:
        env["DPSYN_DATABASE_URL"] = database_url
    entry = data_dir / "serve.py"
    entry.write_text("from app.cli import main\nmain()\n")
    profile = ["-m", "cProfile", "-o", extra_env.pop("PROFILE")] if "PROFILE" in extra_env else []
    command = [sys.executable, *profile, str(entry), "serve", "--data-dir", str(data_dir)]
    server = subprocess.Popen(
        command, env=env, cwd=data_dir, stdout=log, stderr=log, start_new_session=True
    )
    return wait_healthy(server, port, log)


def wait_healthy(server: subprocess.Popen, port: int, log) -> subprocess.Popen:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status, _ = asyncio.run(fetch_once(port, "/healthz", {}, 2.0))
        if status == 200:
            return server
        if server.poll() is not None:
            break
        time.sleep(0.3)
    stop_server(server)
    raise SystemExit(f"the server did not become healthy; see its log {log.name}")


# The ceiling: the least a FastAPI route can cost under these server settings (those of
# ``dpsyn serve`` with no DPSYN_FORWARDED_ALLOW_IPS: ``uvicorn.run(app, host, port,
# log_level="info", proxy_headers=False)``), with no auth, no database and no middleware: a
# fixed body from memory.
CEILING_APP = """
import sys, uvicorn
from fastapi import FastAPI, Response
body = open(sys.argv[1], 'rb').read()
app = FastAPI()
@app.get('/v1/prompts/{prompt_id}')
async def prompt(prompt_id: str) -> Response:
    return Response(body, media_type='application/json')
@app.get('/healthz')
async def healthz() -> Response:
    return Response(b'{"status":"ok"}', media_type='application/json')
uvicorn.run(app, host=sys.argv[2], port=int(sys.argv[3]), log_level='info',
            proxy_headers=False, forwarded_allow_ips=[])
"""


def start_ceiling(body: bytes, data_dir: Path, port: int, log) -> subprocess.Popen:
    """The ceiling server, serving ``body`` (the prompt route's own answer)."""
    body_file = data_dir / "ceiling-body.json"
    body_file.write_bytes(body)
    command = [sys.executable, "-c", CEILING_APP, str(body_file), HOST, str(port)]
    server = subprocess.Popen(command, cwd=data_dir, stdout=log, stderr=log, start_new_session=True)
    return wait_healthy(server, port, log)


async def fetch_body(port: int, path: str, headers: dict[str, str]) -> bytes:
    connection = Connection(port, headers)
    try:
        status, _, body = await connection.get(path)
    finally:
        connection.close()
    if status != 200:
        raise SystemExit(f"GET {path} answered {status}: no body for the ceiling")
    return body


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


# -- main -------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def report(levels: list[Level], store: str) -> None:
    print(f"\nGET /v1/prompts/{{id}} on dpsyn serve, store={store}")
    print(f"{'clients':>7} {'requests':>8} {'req/s':>7} {'2xx/s':>7} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'healthz':>9} {'recover':>8}  statuses / client errors")  # fmt: skip
    for level in levels:
        d = level.as_dict()
        health = f"{d['health_ok']}/{d['health_probes']}"
        statuses = " ".join(f"{k}:{v}" for k, v in d["statuses"].items())
        errors = " ".join(f"{k}:{v}" for k, v in d["client_errors"].items())
        extra = f" cut_off:{level.cut_off}" if level.cut_off else ""
        recover = "never" if level.recovery_s is None else f"{level.recovery_s:.1f}s"
        print(f"{level.clients:>7} {level.answers:>8} {d['throughput']:>7.1f} "
              f"{d['throughput_2xx']:>7.1f} {fmt(d['p50_ms']):>8} {fmt(d['p99_ms']):>8} "
              f"{health:>9} {recover:>8}  {statuses} {errors}{extra}")  # fmt: skip
        cpu = fmt(d["server_cpu_ms_per_answer"], ".2f")
        print(f"{'':>7} healthz max {d['health_max_ms']:.0f} ms, server CPU {cpu} ms/answer")


def report_ceiling(levels: list[Level], ceilings: list[Level]) -> None:
    """The prompt route against the ceiling, level by level: 2xx throughput ratio and p99."""
    print("\nprompts vs ceiling (same client, same run)")
    print(f"{'clients':>7} {'prompts/s':>9} {'ceiling/s':>9} {'ratio':>6} "
          f"{'p99 ms':>8} {'ceil p99':>8}")  # fmt: skip
    for level, top in zip(levels, ceilings, strict=True):
        mine, best = level.as_dict(), top.as_dict()
        ratio = mine["throughput_2xx"] / best["throughput_2xx"] if best["throughput_2xx"] else 0
        print(f"{level.clients:>7} {mine['throughput_2xx']:>9.1f} {best['throughput_2xx']:>9.1f} "
              f"{ratio:>6.2f} {fmt(mine['p99_ms']):>8} {fmt(best['p99_ms']):>8}")  # fmt: skip
        print(
            f"ratio prompts/ceiling at {level.clients} clients: {ratio:.2f}; "
            f"p99 {fmt(mine['p99_ms'])} ms (ceiling {fmt(best['p99_ms'])} ms)"
        )


def verdict(levels: list[Level], min_throughput: float) -> list[str]:
    misses = []
    top, low = max(levels, key=lambda x: x.clients), min(levels, key=lambda x: x.clients)
    if top.bad_5xx or top.errors or top.cut_off:
        misses.append(
            f"{top.clients} clients: {top.bad_5xx} 5xx other than 503, client errors "
            f"{dict(top.errors)}, {top.cut_off} requests cut off"
        )
    if not top.health_ok:
        misses.append(f"{top.clients} clients: /healthz did not answer every probe with 200")
    if not top.latencies:
        misses.append(f"{top.clients} clients: no request admitted, no p99")
    rate = len(low.latencies) / low.seconds if low.seconds else 0.0
    if rate < min_throughput:
        misses.append(f"{low.clients} clients: {rate:.0f} req/s < {min_throughput:.0f}")
    return misses


def _one(url: str) -> tuple[str, str]:
    prompt_id, key = seed(url)
    return f"/v1/prompts/{prompt_id}", key


def seed_mix(url: str, tenants: int, keys: int, prompts: int) -> Pick:
    """``prompts`` prompt sets spread over ``tenants`` tenants with ``keys`` read keys each,
    written straight to the database; the pick of a random key and a prompt of its tenant."""
    from app.db.models import Dataset, Job, KeyScope, PromptSet
    from app.db.session import session_scope
    from app.services.tenants import create_api_key, create_tenant

    owned: list[tuple[list[str], list[str]]] = []
    with session_scope(url) as session:
        for t in range(tenants):
            tenant, _ = create_tenant(session, f"mix-{t}-{time.time_ns()}")
            raw = [
                create_api_key(session, tenant.id, KeyScope.PROMPTS_READ)[1] for _ in range(keys)
            ]
            dataset = Dataset(tenant_id=tenant.id, name="mix", task={}, label_counts={"a": 1},
                              record_count=1)  # fmt: skip
            session.add(dataset)
            session.flush()
            ids = []
            for i in range(t, prompts, tenants):
                job = Job(
                    tenant_id=tenant.id, dataset_id=dataset.id, method="adadpsyn", config={},
                    schedule=[], event={}, epsilon=8.0, delta=1e-6, status="succeeded",
                )  # fmt: skip
                session.add(job)
                session.flush()
                row = PromptSet(
                    tenant_id=tenant.id, job_id=job.id, dataset_id=dataset.id,
                    task={"name": "trec"}, method="adadpsyn", model="bench", epsilon=8.0,
                    delta=1e-6, prompt=f"Classify the questions ({i}).\n\n" * 4,
                    demonstrations=[{"label": "number", "text": f"How many moons {i} ?"}] * 4,
                )  # fmt: skip
                session.add(row)
                session.flush()
                ids.append(row.id)
            owned.append(([f"Bearer {k}" for k in raw], ids))
    draw = random.Random(0)

    def pick() -> tuple[str, dict[str, str]]:
        keys_of, ids = owned[draw.randrange(len(owned))]
        return f"/v1/prompts/{draw.choice(ids)}", {"Authorization": draw.choice(keys_of)}

    return pick


def make_database(admin_url: str) -> tuple[str, str]:
    name = f"dpsyn_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), name


def drop_database(admin_url: str, url: str, name: str) -> None:
    get_engine(url).dispose()
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a PostgreSQL server (its maintenance DB URL)")
    parser.add_argument("--levels", default="16,80,200,500")
    parser.add_argument("--duration", type=float, default=12.0, help="seconds of load a level")
    parser.add_argument("--drain", type=float, default=5.0, help="grace for in-flight requests")
    parser.add_argument("--max-requests", type=int, default=30_000, help="per level")
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--health-timeout", type=float, default=5.0)
    parser.add_argument("--recovery-limit", type=float, default=120.0)
    parser.add_argument("--min-throughput", type=float, default=260.0)
    parser.add_argument("--honor-retry-after", action="store_true")
    parser.add_argument(
        "--no-ceiling", action="store_true", help="skip the minimal-route ceiling server"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--mix",
        type=lambda text: tuple(int(x) for x in text.split(":")),
        metavar="TENANTS:KEYS:PROMPTS",
        help="the read mix: PROMPTS prompt sets over TENANTS tenants with KEYS read keys "
        "each, every request a random key and a random prompt of its tenant (e.g. 100:10:3000)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="DPSYN_X=V",
        help="a setting for the server (e.g. DPSYN_REQUEST_THREADS=16; PROFILE=FILE runs it "
        "under cProfile, its statistics written to FILE when it stops); repeatable",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="dpsyn-load-") as tmp:
        data_dir = Path(tmp)
        created = make_database(args.database_url) if args.database_url else None
        url = created[0] if created else f"sqlite:///{data_dir / 'dpsyn.db'}"
        try:
            upgrade(url)
            pick = seed_mix(url, *args.mix) if args.mix else fixed(*_one(url))
            get_engine(url).dispose()
            levels, ceilings, tracebacks = measure(args, data_dir, url if created else None, pick)
        finally:
            if created:
                drop_database(args.database_url, *created)
    store = "postgresql" if created else "sqlite"
    if args.mix:
        store += " mix {}x{} keys, {} prompts".format(*args.mix)
    report(levels, store + "".join(f" {item}" for item in args.server_env))
    if ceilings:
        report_ceiling(levels, ceilings)
    print(f"server log: {tracebacks} tracebacks")
    if args.json:
        figures = {"prompts": [x.as_dict() for x in levels],
                   "ceiling": [x.as_dict() for x in ceilings]}  # fmt: skip
        args.json.write_text(json.dumps(figures, indent=1))
    misses = verdict(levels, args.min_throughput)
    for miss in misses:
        print(f"MISS: {miss}")
    print("OK: every target met" if not misses else "FAILED")
    return 1 if misses else 0


def measure(
    args, data_dir: Path, database_url: str | None, pick: Pick
) -> tuple[list[Level], list[Level], int]:
    """Each level against the prompt route, then (unless ``--no-ceiling``) against the
    ceiling with the same client; also the prompt server's tracebacks."""
    levels: list[Level] = []
    ceilings: list[Level] = []
    port, ceiling_port = free_port(), free_port()
    with open(data_dir / "server.log", "w+b") as log, \
            open(data_dir / "ceiling.log", "w+b") as ceiling_log:  # fmt: skip
        extra = dict(item.split("=", 1) for item in args.server_env)
        server = start_server(data_dir, database_url, port, log, extra)
        ceiling = None
        try:
            warm = argparse.Namespace(**{**vars(args), "duration": 2.0})
            if not args.mix:  # the mix starts cold: its first read of a prompt misses
                asyncio.run(run_level(port, pick, warm, 4, server.pid))
            if not args.no_ceiling:
                body = asyncio.run(fetch_body(port, *pick()))
                ceiling = start_ceiling(body, data_dir, ceiling_port, ceiling_log)
                asyncio.run(run_level(ceiling_port, pick, warm, 4, ceiling.pid))
            for clients in (int(x) for x in args.levels.split(",")):
                print(f"... {clients} clients", file=sys.stderr, flush=True)
                levels.append(asyncio.run(run_level(port, pick, args, clients, server.pid)))
                if ceiling is not None:
                    print(f"... {clients} clients (ceiling)", file=sys.stderr, flush=True)
                    ceilings.append(
                        asyncio.run(run_level(ceiling_port, pick, args, clients, ceiling.pid))
                    )
        finally:
            stop_server(server)
            if ceiling is not None:
                stop_server(ceiling)
        log.seek(0)
        return levels, ceilings, log.read().count(b"Traceback")


if __name__ == "__main__":
    sys.exit(main())
