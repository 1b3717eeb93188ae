"""Benchmark: what sealing the records at rest costs an upload and a job's start.

Run: .venv/bin/python bench/records_at_rest.py [--root CHECKOUT] [--postgres] [--repeat 3]

In a fresh process whose ``app`` is ``--root``'s (default: this checkout; a worktree of an
older commit measures "before"), on a new SQLite file (``--postgres``: a new database on the
local server, dropped afterwards), it uploads TREC's training file (5,452 records, from
``../shared/data``) through ``POST /v1/datasets`` and times it, then times what a job's start
does with them, ``load_records`` (since the records are sealed: opening each with the
dataset's data key). Medians of ``--repeat`` uploads (each of different records: a
re-upload of the same ones is another matter) and of two reads each; the table gives
milliseconds. A report: run it on both commits and compare (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = r"""
import json, statistics, sys, tempfile, time, uuid
from pathlib import Path
from fastapi.testclient import TestClient
from app.db.migrate import upgrade
from app.db.session import session_scope
from app.main import create_app
from app.services.datasets import load_records
from app.settings import Settings
from app.synthesis.data import load_dataset
from app.synthesis.tasks import BUILTIN_TASKS

try:  # a commit with record reads: say who reads (the job's start, as the worker does)
    from app.services.record_reads import Reader, ReaderKind
    reader = (Reader.of(ReaderKind.JOB, "bench"),)
except ImportError:
    reader = ()
url, repeat = sys.argv[1], int(sys.argv[2])
upgrade(url)
records = load_dataset(BUILTIN_TASKS["trec"], Path(sys.argv[3]))
key = "bench-" + uuid.uuid4().hex + uuid.uuid4().hex
app = create_app(Settings(database_url=url, bootstrap_api_key=key))
uploads, reads = [], []
with TestClient(app) as client:
    client.headers["Authorization"] = f"Bearer {key}"
    for i in range(repeat):
        started = time.perf_counter()
        rows = [{"text": f"{i} {r.text}", "label": r.label} for r in records]
        made = client.post("/v1/datasets", json={"task": "trec", "records": rows})
        uploads.append(time.perf_counter() - started)
        assert made.status_code == 201, made.text[:300]
        for _ in range(2):
            started = time.perf_counter()
            with session_scope(url) as session:
                n = len(load_records(session, made.json()["id"], *reader))
            reads.append(time.perf_counter() - started)
        assert n == len(records)
print(json.dumps({"records": len(records), "upload_s": statistics.median(uploads),
                  "read_s": statistics.median(reads)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trec = ROOT.parent / "shared" / "data" / "trec" / "train.txt"
    commit = subprocess.run(["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dpsyn-at-rest-") as tmp:
        url, drop = _database(Path(tmp), args.postgres)
        env = {**os.environ, "PYTHONPATH": str(args.root),
               "DPSYN_RECORD_KEYS_DIR": str(Path(tmp) / "keys")}  # fmt: skip
        try:
            out = subprocess.run(
                [sys.executable, "-c", INNER, url, str(args.repeat), str(trec)],
                env=env, cwd=tmp, capture_output=True, text=True, check=True,
            )  # fmt: skip
        finally:
            drop()
    result = json.loads(out.stdout.strip().splitlines()[-1])
    store = "PostgreSQL" if args.postgres else "SQLite"
    print(f"commit {commit}, {store}, {result['records']} records")
    print("| upload (ms) | load_records (ms) |")
    print("|---|---|")
    print(f"| {result['upload_s'] * 1000:.0f} | {result['read_s'] * 1000:.0f} |")


def _database(folder: Path, postgres: bool) -> tuple[str, object]:
    """A new database's URL and what drops it."""
    if not postgres:
        return f"sqlite:///{folder / 'dpsyn.db'}", lambda: None
    from sqlalchemy import create_engine, text

    name = f"dpsyn_bench_{os.getpid()}"
    admin = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
                          isolation_level="AUTOCOMMIT")  # fmt: skip
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", drop


if __name__ == "__main__":
    main()
