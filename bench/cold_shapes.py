"""Benchmark: cold quotes of shapes off the planner's table, on a running server (issue 53).

Run: .venv/bin/python bench/cold_shapes.py [--database postgresql+psycopg://...] [--root DIR]
        [--records 3000] [--json out.json]

It starts ``dpsyn serve`` on 127.0.0.1 (``--database`` unset: embedded, SQLite in a temporary
data directory; set: that database, as a distributed deployment uses it; jobs are never
queued: quotes only), uploads the first ``--records`` TREC training questions (6 labels,
counts not declared public) and funds them. Then, each a fresh server process's first sight
of the shape:

1. the dataset's first quote (M 10 / K 100, a shape in the table): it draws and charges the
   dataset's count release first;
2. one quote at a time for the cold off-table shapes :data:`ONE_BY_ONE` (M 7 / K 50 up to
   M 200 / K 1000), each at an epsilon of its own so that no calibration is reused;
3. :data:`AT_ONCE`, nine shapes no quote met before, sent at once by one tenant (the
   planning lane runs one plan of a tenant at a time and queues the rest): each answer's
   seconds, the last one's being what the tenant waits.

``--root DIR`` runs the server of another checkout (``git archive COMMIT | tar -x -C DIR``):
how the numbers before a change were taken. Exit status 1 when a one-by-one quote takes a
second or more, or a quote is not 200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import load  # noqa: E402
from submission_burst import ADMIN_KEY, HOST, trec_records  # noqa: E402

FIRST = (10, 100)  # a shape in the table
ONE_BY_ONE = [(7, 50), (10, 77), (30, 100), (3, 10), (64, 256), (200, 1000)]
AT_ONCE = [(5, 40), (8, 60), (12, 90), (15, 120), (25, 150), (50, 300), (80, 500), (150, 700)]
AT_ONCE += [(200, 999)]
TARGET_S = 1.0


def funded(base: str, records: int) -> str:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        upload = http.post("/v1/datasets", json={"task": "trec", "records": trec_records(records)})
        upload.raise_for_status()
        dataset_id = str(upload.json()["id"])
        http.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 100.0}).raise_for_status()
    return dataset_id


async def quote(base: str, dataset_id: str, M: int, K: int, epsilon: float) -> tuple[int, float]:
    """One quote on its own connection: status and seconds."""
    body = {
        "dataset_id": dataset_id,
        "method": "adadpsyn",
        "epsilon": epsilon,
        "params": {"M": M, "K": K},
    }
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=600) as http:
        start = time.monotonic()
        response = await http.post("/v1/jobs/quote", json=body)
        seconds = time.monotonic() - start
    if response.status_code != 200:
        print(f"  M {M} K {K}: {response.status_code} {response.text[:300]}")
    return response.status_code, seconds


async def at_once(base: str, dataset_id: str) -> list[tuple[int, float]]:
    return list(
        await asyncio.gather(
            *(quote(base, dataset_id, M, K, 1.5 + i / 100) for i, (M, K) in enumerate(AT_ONCE))
        )
    )


def measure(base: str, records: int) -> dict:
    dataset_id = funded(base, records)
    out: dict = {"first": asyncio.run(quote(base, dataset_id, *FIRST, 1.0))}
    out["one_by_one"] = [
        asyncio.run(quote(base, dataset_id, M, K, 1.0 + (i + 1) / 100))
        for i, (M, K) in enumerate(ONE_BY_ONE)
    ]
    out["at_once"] = asyncio.run(at_once(base, dataset_id))
    return out


def run(args: argparse.Namespace) -> dict:
    root = args.root.resolve() if args.root else ROOT
    load.ROOT = root  # the server's PYTHONPATH
    with tempfile.TemporaryDirectory(prefix="dpsyn-cold-shapes-") as tmp:
        data_dir = Path(tmp)
        port = load.free_port()
        extra = {"DPSYN_BOOTSTRAP_API_KEY": ADMIN_KEY, "DPSYN_BROKER_URL": args.broker}
        if args.profile:
            extra["PROFILE"] = str(args.profile.resolve())
        with open(data_dir / "server.log", "w+b") as log:
            server = load.start_server(data_dir, args.database, port, log, extra)
            try:
                return measure(f"http://{HOST}:{port}", args.records)
            finally:
                load.stop_server(server)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="a database URL (default: embedded SQLite)")
    parser.add_argument("--root", type=Path, help="the checkout whose server runs")
    parser.add_argument("--records", type=int, default=3000, help="TREC questions uploaded")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--profile", type=Path, help="cProfile the server into this file")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--largest", type=int, help="leave out shapes of more M x K (a slow server's run)"
    )
    args = parser.parse_args()
    if args.largest:
        ONE_BY_ONE[:] = [s for s in ONE_BY_ONE if s[0] * s[1] <= args.largest]
        AT_ONCE[:] = [s for s in AT_ONCE if s[0] * s[1] <= args.largest]
    figures = run(args)
    figures["load_average"] = os.getloadavg()[0]
    where = args.database.split("://")[0] if args.database else "embedded (SQLite)"
    print(f"cold quotes on dpsyn serve, {where}, AdaDPSyn on TREC, {args.records} records")
    status, seconds = figures["first"]
    print(f"first quote of the dataset, M {FIRST[0]} K {FIRST[1]}: {seconds:.2f} s ({status})")
    for (M, K), (status, seconds) in zip(ONE_BY_ONE, figures["one_by_one"], strict=True):
        print(f"cold quote M {M} K {K}: {seconds:.2f} s ({status})")
    answers = figures["at_once"]
    times = ", ".join(f"{s:.1f}" for _, s in sorted(answers, key=lambda a: a[1]))
    print(f"{len(AT_ONCE)} shapes at once from one tenant: answered after {times} s")
    print(f"(load average {figures['load_average']:.1f})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    timed = [figures["first"], *figures["one_by_one"]]
    misses = [f"{s:.2f} s" for _, s in timed if s >= TARGET_S]
    misses += [f"status {c}" for c, _ in [*timed, *answers] if c != 200]
    print("OK" if not misses else f"MISS: {misses}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
