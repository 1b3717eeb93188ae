"""Benchmark: the time ``dpsyn advise`` says the rest will take, against the time it takes.

Run: .venv/bin/python bench/advise_estimate.py [--root CHECKOUT] [--data FILE --labels A,B]
     .venv/bin/python bench/advise_estimate.py --replay TRACE.json

Live (the default): the real ``dpsyn advise`` of the checkout ``--root`` (default: this one;
a worktree of an older commit measures "before"), with the packaged CPU model, on a 4-label
custom task of ticket-like records: 60 AG News training records (15 per label; title and
description cut to 200 characters, as a support ticket is short) from ``../shared/data``,
labelled world, sports, business, tech (``--data``/``--labels`` take another file). Every
line it writes to stderr is stamped on arrival; at the end the bench prints, for every
estimate printed, the seconds since the start, the range said, the seconds the advice
really had left then, and whether the range held: the truth inside it, and the range's
(geometric) middle within twice the truth either way. ``--trace FILE`` keeps the runs' measured
durations and the stamps, which ``--replay`` prices again through this checkout's
estimator (no model: seconds) as the advice would have printed them.

Exit status 1 when an estimate from a measured prompt run on fails to hold (the target;
the guess printed before any prompt run is measured must only contain the truth).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "agnews" / "train_first10429.csv"
LABELS = {"1": "world", "2": "sports", "3": "business", "4": "tech"}
UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}
RANGE = re.compile(
    r"about (?P<low>[\d.]+)(?: (?P<low_unit>s|min|h))?(?:–(?P<high>[\d.]+))? (?P<unit>s|min|h)"
)
RUN = re.compile(r"^\[(?P<done>\d+)/(?P<total>\d+)\] (?P<what>\S+) seed \d+: .*\((?P<s>[\d.]+) s\)")


def tickets(path: Path, per_label: int = 15) -> None:
    """The walk's private set, from public data: ``per_label`` records of each AG News class,
    title and description cut to about 200 characters at a word."""
    kept: dict[str, list[str]] = {k: [] for k in LABELS}
    with DATA.open(newline="") as source:
        for label, title, text in csv.reader(source):
            if len(kept[label]) < per_label:
                kept[label].append(_ticket(f"{title}. {text}"))
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text", "label"])
        for i in range(per_label):
            for key, name in LABELS.items():
                writer.writerow([kept[key][i], name])


def _ticket(text: str) -> str:
    text = text.replace("\\", " ")
    return text if len(text) <= 200 else text[:200].rsplit(" ", 1)[0]


def parse_range(line: str) -> tuple[float, float] | None:
    """(low, high) seconds of "about 5–9 min", "about 50 s–3 min", "about 7 min" or the old
    "about 1.7 h"; None when the line says no time."""
    found = RANGE.search(line)
    if found is None:
        return None
    unit = UNITS[found["unit"]]
    low_unit = UNITS[found["low_unit"]] if found["low_unit"] else unit
    low = float(found["low"]) * low_unit
    high = float(found["high"]) * unit if found["high"] else low
    return low, high


def live(
    root: Path, data: Path, labels: str, extra: list[str], threads: int | None
) -> dict[str, object]:
    """Run the real CLI of ``root``; every stderr line with its seconds since the start.
    ``threads``: the model's CPU threads (OMP_NUM_THREADS), where the machine is shared."""
    command = [sys.executable, "-c", "from app.cli import main; main()", "advise"]
    command += ["--data", str(data), "--labels", labels, *extra]
    started = time.monotonic()
    stamped: list[tuple[float, str]] = []
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "400"}  # COLUMNS: no wrapping
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with subprocess.Popen(command, cwd=root, env=env, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            stamped.append((time.monotonic() - started, line.rstrip("\n")))
            print(f"{stamped[-1][0]:7.1f} {stamped[-1][1]}", file=sys.stderr)
    return {"lines": stamped, "end": time.monotonic() - started, "rc": proc.returncode}


def replay(trace: dict[str, object]) -> list[tuple[float, str]]:
    """The estimate lines this checkout's estimator prints for the trace's measured runs, at
    the moments the runs ended (the plan of the trace's own grid, 4 shots, 2 methods)."""
    from app.eval.advice import AdviceConfig, _profile, planned_runs
    from app.eval.run_estimate import RunEstimate
    from app.synthesis.tasks import BUILTIN_TASKS

    # a 4-label task named as --labels names it (its M is the generic one, as the walk's)
    task = BUILTIN_TASKS["agnews"].model_copy(update={"name": "custom"})
    plan = next(line for _at, line in trace["lines"] if line.startswith("advice: "))  # type: ignore[attr-defined]
    seeds = int(re.search(r"x (\d+) seed", plan)[1])  # type: ignore[index]
    clock = RunEstimate(planned_runs(task, AdviceConfig(seeds=seeds)))
    out: list[tuple[float, str]] = []
    for at, line in trace["lines"]:  # type: ignore[attr-defined]
        found = RUN.match(line)
        if found is None:
            continue
        method, _at, epsilon = found["what"].partition("@")
        zero = method == "zero-shot"
        clock.finished(
            _profile(None if zero else method, 4, float(epsilon or 0)), float(found["s"])
        )
        said = clock.line()
        if said is not None:
            out.append((at, said))
    return out


def table(estimates: list[tuple[float, str]], end: float) -> bool:
    """Print estimate against truth; True when every estimate from a measured prompt run on
    held: the truth inside the range, and its (geometric) middle within twice the truth either
    way; the width (high/low) is printed beside."""
    print(
        "| at (s) | printed | truth left | low/truth | high/truth | middle/truth | width | holds |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---")
    ok = True
    for at, line in estimates:
        bounds = parse_range(line)
        if bounds is None:
            continue
        truth = max(end - at, 1e-9)
        low, high = bounds
        guess = "guess" in line or "(rough)" in line
        middle = math.sqrt(low * high) / truth
        holds = low <= truth <= high and (guess or 0.5 <= middle <= 2.0)
        ok = ok and holds
        text = line.split("the rest ", 1)[-1]
        print(
            f"| {at:.0f} | {text} | {truth:.0f} s | {low / truth:.2f} | {high / truth:.2f} "
            f"| {middle:.2f} | {high / max(low, 1e-9):.1f}x "
            f"| {'yes' if holds else 'NO'}{' (guess)' if guess else ''} |"
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose CLI runs")
    parser.add_argument("--data", type=Path, help="a CSV with text,label (default: tickets)")
    parser.add_argument("--labels", default=",".join(LABELS.values()))
    parser.add_argument("--trace", type=Path, help="write the stamped lines here")
    parser.add_argument("--replay", type=Path, help="price a trace again, no model")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the model")
    parser.add_argument("extra", nargs="*", help="more dpsyn advise options, after --")
    args = parser.parse_args()
    if args.replay is not None:
        trace = json.loads(args.replay.read_text())
        estimates = replay(trace)
        end = float(trace["end"])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            data = args.data or Path(tmp) / "tickets.csv"
            if args.data is None:
                tickets(data)
            trace = live(args.root, data, args.labels, args.extra, args.threads)
        end = float(trace["end"])  # type: ignore[arg-type]
        if args.trace is not None:
            args.trace.write_text(json.dumps(trace, indent=1, ensure_ascii=False))
        estimates = [(at, line) for at, line in trace["lines"] if "the rest" in line]  # type: ignore[attr-defined]
    ok = table(estimates, end)
    print(f"advise took {end:.0f} s in all; every estimate from a measured run held: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
