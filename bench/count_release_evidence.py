"""Issue 41's evidence: one count release per dataset, each label at its own noise, against
the per-job release of commit 239348f, on TREC, AG News, SST-2 and TREC-14, at epsilon 1 and 4,
for Tang et al. and AdaDPSyn.

Run (from the repository root; the code before the change in a worktree of its own):

    git worktree add /tmp/before 239348f
    nice -n 10 .venv/bin/python bench/count_release_evidence.py          # part A, then part B
    .venv/bin/python bench/count_release_evidence.py --part tables       # the tables, again

Part A (``--part plan``, no model): each side's own code plans jobs on the real label counts
of the training data, at the tasks' default shape (M, N, T_max, K) with 4 shots. Before: the
job releases its charged labels' counts at 5% of its epsilon (floored at 1) and one multiplier
serves all its labels. After: a local run (``app.methods.base.plan_local``): the dataset's one
release at 5% of the target, posterior-mean estimates, each label calibrated on its own for the
remaining 95%. ``--tang-draws`` and ``--ada-draws`` jobs (seeds 0, 1, ...) are planned in full;
``--rate-draws`` Tang jobs per cell are planned without the noise calibration (the sampling
rates depend on the schedule and the released counts only) for the share of jobs with a
charged label at sampling rate 1 because of the release (its exact count would not be).

Part B (``--part accuracy``, the packaged CPU model): ``dpsyn eval --quick`` runs
(:func:`app.eval.experiment.run_one`) paired by seed, each side's code in a worker process of
its own (the before one on ``$EVIDENCE_BEFORE``, default /tmp/before), both at once, zero-shot
once per dataset (it reads no private data: the same code on both sides). Runs are appended
to ``out/evidence/accuracy.jsonl`` as they end, cell by cell in :data:`PRIORITY` order, so a
cut run has whole cells of the most telling ones; a rerun skips the runs the file holds.

Tables: ``out/evidence/tables.md`` (printed too), from the JSON lines of both parts.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "evidence"
DATASETS = ("trec", "agnews", "sst2", "trec14")
EPSILONS = (1.0, 4.0)
METHODS = ("tang", "adadpsyn")
SIDES = ("before", "after")
# The datasets with a label near M*N (TREC's 86 Abbreviation records, TREC-14's 103-189):
# the others (every label over 2,400 records) get a fifth of the rate draws.
SMALL_LABELS = ("trec", "trec14")
SHOTS = 4
RESULT = "RESULT "  # a worker's answer line (anything else on its stdout is ignored)


# ---------------------------------------------------------------------------- both sides


def _configure(name: str, dataset: str, epsilon: float, seed: int, params: dict[str, Any]):
    """The task, the method and its config on this process's code (either side)."""
    from app.eval import methods as eval_methods
    from app.synthesis.tasks import BUILTIN_TASKS

    task = BUILTIN_TASKS[dataset]
    job = eval_methods.JobSpec(epsilon=epsilon, shots=SHOTS, seed=seed)
    method, config = eval_methods.configure(name, task, job, params)
    return task, method, config


@functools.cache
def _sizes(dataset: str) -> dict[str, int]:
    """The exact records per label of the dataset's training split."""
    from app.eval.datasets import default_data_dir, load_split
    from app.synthesis.generator import partition_sizes
    from app.synthesis.tasks import BUILTIN_TASKS

    train, _ = load_split(dataset, default_data_dir())
    return partition_sizes(BUILTIN_TASKS[dataset], train)


def _plan_before(
    name: str, dataset: str, epsilon: float, seed: int, priced: bool = True
) -> dict[str, Any]:
    """A job planned by the code before the change: its own count release, one multiplier
    (``priced``: with the job's epsilon, which includes the release)."""
    from app.methods.base import Counts

    task, method, config = _configure(name, dataset, epsilon, seed, {})
    sizes = _sizes(dataset)
    counts = Counts(labels=sizes, private=sum(sizes.values()), public=0, declared_public=False)
    plan = method.plan(task, config, counts).plan
    sigma = plan.privacy.params.free_multiplier
    row = _plan_row(plan, {label: sigma for label in plan.charged()}, plan.privacy.count_sigma)
    if priced:
        row["epsilon_total"] = plan.epsilon()
    return row


def _plan_after(
    name: str, dataset: str, epsilon: float, seed: int, priced: bool = True
) -> dict[str, Any]:
    """A local run planned by the code after the change (``plan_local``; ``priced``: with
    the run's epsilon, the job's plus the release's)."""
    from app.methods.base import plan_local

    task, method, config = _configure(name, dataset, epsilon, seed, {})
    local = plan_local(method, task, config, _sizes(dataset), declared_public=False)
    plan = local.plan.plan
    release_sigma = local.release.sigma if local.release is not None else None
    row = _plan_row(plan, plan.privacy.noise_by_label(), release_sigma)
    if priced:
        row["epsilon_total"] = local.epsilon()
    return row


def _plan_row(plan: Any, sigma: dict[str, float], count_sigma: float | None) -> dict[str, Any]:
    """What a planned job says about its labels: planned size, sampling rate and noise."""
    planned = {label: int(plan.planned_sizes[label]) for label in plan.charged()}
    return {
        "planned": planned,
        "rate": {label: plan.privacy.sampling(n).rate for label, n in planned.items()},
        "sigma": {label: float(value) for label, value in sigma.items()},
        "count_sigma": count_sigma,
        "planner": dict(plan.planner),
        "M": plan.config.M,
        "N": plan.config.N,
    }


# ---------------------------------------------------------------------------- part A


def _skip_calibration(side: str) -> None:
    """Plan without calibrating the noise (rates only), and remember the count multiplier
    (a pure function of public settings): the sizes and rates planned stay the same."""
    import app.privacy.unit as unit
    import app.synthesis.generator as generator

    if side == "before":
        generator.count_noise_multiplier = functools.cache(generator.count_noise_multiplier)
        generator.calibrate_noise = lambda privacy, **_: SimpleNamespace(privacy=privacy)
    else:
        unit.count_noise_multiplier = functools.cache(unit.count_noise_multiplier)
        generator._calibrated = lambda base, sizes, charged, config, delta: (base, {})


def _rate_one(row: dict[str, Any], exact: dict[str, int]) -> list[str]:
    """The charged labels at sampling rate 1 that the exact count would sample below 1."""
    mn = row["M"] * row["N"]
    return [label for label, q in row["rate"].items() if q >= 1.0 and exact[label] > mn]


def _rate_cell(side: str, dataset: str, epsilon: float, draws: int) -> dict[str, Any]:
    """The share of ``draws`` Tang jobs with a label at rate 1 because of the release."""
    plan = _plan_before if side == "before" else _plan_after
    exact = _sizes(dataset)
    jobs, charged, at_one = 0, dict.fromkeys(exact, 0), dict.fromkeys(exact, 0)
    for seed in range(draws):
        row = plan("tang", dataset, epsilon, seed, priced=False)
        hit = _rate_one(row, exact)
        jobs += bool(hit)
        for label in row["rate"]:
            charged[label] += 1
            at_one[label] += label in hit
    return {"jobs_at_rate_1": jobs, "charged": charged, "at_rate_1": at_one}


def plan_side(side: str, args: argparse.Namespace) -> None:
    """Part A on this process's code (``side``): rate draws first, then full plans, seed by
    seed over the cells (so that a cut run is balanced); what the file holds is skipped."""
    path = OUT / "planning.jsonl"
    done = {_plan_key(row) for row in _rows(path) if row["side"] == side}
    cells = [(d, e) for d in args.datasets for e in args.epsilons]
    for dataset, epsilon in cells:
        if ("rate", dataset, epsilon, None, None) not in done:
            _append(path, _timed_plan_cell(side, dataset, epsilon, args))
    for name, draws in (("tang", args.tang_draws), ("adadpsyn", args.ada_draws)):
        for seed in range(draws):
            for dataset, epsilon in cells:
                if ("plan", dataset, epsilon, name, seed) not in done:
                    _append(path, _full_plan(side, name, dataset, epsilon, seed))


def _plan_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a row of part A (within one side)."""
    return (row["part"], row["dataset"], row["epsilon"], row.get("method"), row.get("seed"))


def _timed_plan_cell(
    side: str, dataset: str, epsilon: float, args: argparse.Namespace
) -> dict[str, Any]:
    """One cell of rate draws in a child process (which patches its planner) as one row."""
    started = time.perf_counter()
    draws = args.rate_draws // (1 if dataset in SMALL_LABELS else 5)
    cell = _in_child(side, ["--rate-cell", f"{dataset}:{epsilon:g}:{draws}"])
    key = {"part": "rate", "side": side, "dataset": dataset, "epsilon": epsilon}
    row = {**key, "draws": draws, **cell}
    row["seconds"] = time.perf_counter() - started
    _log(f"{side} rate {dataset} eps {epsilon:g}: {cell['jobs_at_rate_1']}/{draws}")
    return row


def _full_plan(side: str, name: str, dataset: str, epsilon: float, seed: int) -> dict[str, Any]:
    """One job planned in full, with its noise per label, as one row."""
    started = time.perf_counter()
    plan = _plan_before if side == "before" else _plan_after
    row = plan(name, dataset, epsilon, seed, priced=seed == 0)  # the price: a check, once
    key = {"part": "plan", "side": side, "dataset": dataset, "epsilon": epsilon}
    row = {**key, "method": name, "seed": seed, **row}
    row["seconds"] = time.perf_counter() - started
    _log(f"{side} {name} {dataset} eps {epsilon:g} seed {seed}: {row['seconds']:.1f} s")
    return row


def _in_child(side: str, argv: list[str]) -> dict[str, Any]:
    """Run this script with ``argv`` on ``side``'s code; its one RESULT line."""
    command = [sys.executable, __file__, "--side", side, *argv]
    answer = subprocess.run(
        command, env=_side_env(side), stdout=subprocess.PIPE, check=True, text=True
    )
    return _result(answer.stdout.splitlines())


# ---------------------------------------------------------------------------- part B


@functools.cache
def _split(dataset: str, test_size: int) -> tuple[list[Any], list[Any]]:
    """The training records and the fixed test queries of ``dataset``."""
    from app.eval.datasets import default_data_dir, load_split
    from app.eval.experiment import pick_test_subset

    train, test = load_split(dataset, default_data_dir())
    return train, pick_test_subset(test, test_size)


@functools.cache
def _backend() -> Any:
    """The packaged CPU model, loaded once per worker."""
    from app.llm.factory import BackendKind, make_backend

    return make_backend(BackendKind.TRANSFORMERS, model=None, url=None)


def _capture_results() -> list[Any]:
    """Have ``run_method`` keep each run's result (its plan, event and stats) in a list."""
    import app.eval.methods as eval_methods

    kept: list[Any] = []
    original = eval_methods.run_method

    def run_method(*args: Any, **kwargs: Any) -> Any:
        run = original(*args, **kwargs)
        kept.append(run.result)
        return run

    eval_methods.run_method = run_method
    return kept


def _accuracy_run(request: dict[str, Any], kept: list[Any]) -> dict[str, Any]:
    """One ``dpsyn eval --quick`` run (or zero-shot) on this worker's code."""
    from app.eval.experiment import ExperimentConfig, Setting, run_one
    from app.synthesis.tasks import BUILTIN_TASKS

    dataset, name = request["dataset"], request["method"]
    train, queries = _split(dataset, request["test_size"])
    config = ExperimentConfig.quick(dataset, seeds=(request["seed"],), shots=SHOTS, baselines=False)
    if name == "zero-shot":
        setting = Setting("zero-shot", 0.0)
    else:
        setting = Setting(name, request["epsilon"], name)
    kept.clear()
    run = run_one(
        BUILTIN_TASKS[dataset], train, queries, setting, request["seed"], _backend(), config
    )
    row = {**request, "accuracy": run.accuracy, "calibrated_accuracy": run.calibrated_accuracy}
    row.update(epsilon_charged=run.epsilon_charged, n_test=run.n_test, seconds=run.seconds)
    return {**row, **(_result_noise(kept[0]) if kept else {})}


def _result_noise(result: Any) -> dict[str, Any]:
    """A result's noise per charged label, their sampling rates and the planner's stats."""
    labels = {e["label"]: e["event"]["sampling"].get("rate") for e in result.event["labels"]}
    per_label = result.plan.get("label_params") or {}
    shared = result.plan["params"]
    sigma = {label: _free(per_label.get(label, shared)) for label in labels}
    planner = {k: v for k, v in result.stats.items() if k.startswith("planner_")}
    return {"sigma": sigma, "rate": labels, "planner": planner}


def _free(params: dict[str, Any]) -> float:
    """The calibrated multiplier of a dumped aggregator: Tang's sigma, AdaDPSyn's sigma1."""
    return float(params["sigma1"] if "sigma1" in params else params["sigma"])


def worker(side: str) -> None:
    """Answer run requests (JSON lines on stdin) with RESULT lines, until stdin closes."""
    kept = _capture_results()
    for line in sys.stdin:
        request = json.loads(line)
        row = _accuracy_run(request, kept)
        print(RESULT + json.dumps({**row, "side": side}), flush=True)


class Worker:
    """A worker process on one side's code, asked one run at a time."""

    def __init__(self, side: str) -> None:
        command = [sys.executable, __file__, "--side", side, "--worker"]
        env = {**_side_env(side), "OMP_NUM_THREADS": "1"}  # two workers share two cores
        self.process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return _result(iter(self.process.stdout.readline, ""))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def accuracy(args: argparse.Namespace) -> None:
    """Part B: the two sides at once, one worker (one torch thread) each, every run in
    :func:`_requests`' order, appended to ``accuracy.jsonl`` as it ends."""
    path = OUT / "accuracy.jsonl"
    done = _done(path)
    lock = threading.Lock()
    threads = [
        threading.Thread(target=_serve_side, args=(side, args, done, lock, path)) for side in SIDES
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _serve_side(
    side: str, args: argparse.Namespace, done: set[tuple[Any, ...]], lock: Any, path: Path
) -> None:
    """Feed one side's worker its runs in order; skip those the file already holds."""
    worker = Worker(side)
    try:
        for request in _requests(args, side):
            if _key({**request, "side": side}) in done:
                continue
            row = worker.ask(request)
            with lock:
                _append(path, row)
                _log(_accuracy_line(row))
    finally:
        worker.close()


#: Part B's order: the cells where the release moved the noise most first (TREC's 86
#: Abbreviation records, TREC-14's small labels, at epsilon 1), so that a cut run has whole
#: cells of the most telling ones.
PRIORITY = [(d, e) for e in EPSILONS for d in ("trec", "trec14")]
PRIORITY += [(d, e) for e in EPSILONS for d in ("agnews", "sst2")]


def _requests(args: argparse.Namespace, side: str) -> Iterator[dict[str, Any]]:
    """One side's runs: cell by cell in :data:`PRIORITY` order, each cell's seeds and
    methods; zero-shot (on the after side only: it reads no private data) before a
    dataset's first cell."""
    base = {"test_size": args.test_size}
    zero_done: set[str] = set()
    for dataset, epsilon in PRIORITY:
        if dataset not in args.datasets or epsilon not in args.epsilons:
            continue
        if side == "after" and dataset not in zero_done:
            zero_done.add(dataset)
            yield {**base, "dataset": dataset, "method": "zero-shot", "epsilon": 0.0, "seed": 0}
        for seed in args.seeds:
            for name in METHODS:
                yield {**base, "dataset": dataset, "method": name, "epsilon": epsilon, "seed": seed}


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a run (a rerun skips the runs already in the file)."""
    names = ("side", "dataset", "method", "epsilon", "seed", "test_size")
    return tuple(row[name] for name in names)


def _done(path: Path) -> set[tuple[Any, ...]]:
    return {_key(row) for row in _rows(path)}


def _accuracy_line(row: dict[str, Any]) -> str:
    sigma = ", ".join(f"{v:.2f}" for v in row.get("sigma", {}).values())
    return (
        f"{row['side']} {row['method']} {row['dataset']} eps {row['epsilon']:g} seed "
        f"{row['seed']}: {row['accuracy']:.2f} (cal {row['calibrated_accuracy']}) "
        f"sigma [{sigma}] {row['seconds']:.0f} s"
    )


# ---------------------------------------------------------------------------- tables


def tables() -> str:
    """All tables, from the JSON lines of both parts, as markdown."""
    planning = _rows(OUT / "planning.jsonl")
    runs = _rows(OUT / "accuracy.jsonl")
    parts = [_rate_table(planning), _sigma_table(planning), _accuracy_table(runs)]
    return "\n\n".join(part for part in parts if part) + "\n"


def _rate_table(rows: list[dict[str, Any]]) -> str:
    """The share of jobs with a label at rate 1 because of the release, per cell and side."""
    cells = {(r["dataset"], r["epsilon"], r["side"]): r for r in rows if r["part"] == "rate"}
    if not cells:
        return ""
    lines = [
        "| dataset | ε | before: jobs at rate 1 | after: jobs at rate 1 | draws before / after |",
        "|---|---|---|---|---|",
    ]
    for dataset, epsilon in _cells(cells):
        shares = [_share(cells.get((dataset, epsilon, side))) for side in SIDES]
        draws = " / ".join(_draws(cells.get((dataset, epsilon, side))) for side in SIDES)
        lines.append(f"| {dataset} | {epsilon:g} | {shares[0]} | {shares[1]} | {draws} |")
    return "\n".join(lines)


def _draws(row: dict[str, Any] | None) -> str:
    return "-" if row is None else f"{row['draws']:,}"


def _share(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    worst = max(row["at_rate_1"], key=lambda label: row["at_rate_1"][label])
    note = (
        f" ({worst} {row['at_rate_1'][worst]}/{row['charged'][worst]})"
        if row["at_rate_1"][worst]
        else ""
    )
    return f"{100 * row['jobs_at_rate_1'] / row['draws']:.2f}%{note}"


def _sigma_table(rows: list[dict[str, Any]]) -> str:
    """Per label: median and 90th percentile of its noise multiplier over the jobs that
    charged it, before and after."""
    plans = [r for r in rows if r["part"] == "plan"]
    if not plans:
        return ""
    lines = [
        "| dataset | ε | method | label (records) | before: σ median / p90 "
        "| after: σ median / p90 | values before / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset, epsilon, name in _plan_cells(plans):
        lines += _sigma_rows(plans, dataset, epsilon, name)
    return "\n".join(lines)


def _sigma_rows(plans: list[dict[str, Any]], dataset: str, epsilon: float, name: str) -> list[str]:
    """The rows of one (dataset, epsilon, method) cell: one per label, then every charged
    label of every job pooled."""
    mine = [
        p for p in plans if (p["dataset"], p["epsilon"], p["method"]) == (dataset, epsilon, name)
    ]
    by_side = {side: [p for p in mine if p["side"] == side] for side in SIDES}
    exact = _sizes(dataset)
    cell = f"| {dataset} | {epsilon:g} | {name} |"
    out = [
        _sigma_row(f"{cell} {label} ({exact[label]})", by_side, lambda p, k=label: [k])
        for label in exact
    ]
    out.append(_sigma_row(f"{cell} every charged label", by_side, lambda p: list(p["sigma"])))
    return out


def _sigma_row(head: str, by_side: dict[str, list[dict[str, Any]]], labels: Any) -> str:
    """One row: the sigma of ``labels(job)`` over each side's jobs (those that charged them)."""
    values = {
        side: [p["sigma"][k] for p in by_side[side] for k in labels(p) if k in p["sigma"]]
        for side in SIDES
    }
    stats = [_median_p90(values[side]) for side in SIDES]
    counts = " / ".join(str(len(values[side])) for side in SIDES)
    return f"{head} | {stats[0]} | {stats[1]} | {counts} |"


def _median_p90(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{np.median(values):.2f} / {np.percentile(values, 90):.2f}"


def _accuracy_table(rows: list[dict[str, Any]]) -> str:
    """Accuracy per cell: before and after (mean ± SE over the paired seeds), the paired
    difference with its SE, and zero-shot, raw and calibrated."""
    if not rows:
        return ""
    zero = {r["dataset"]: r for r in rows if r["method"] == "zero-shot"}
    lines = [
        "| dataset | ε | method | seeds | before | after | after − before (paired) "
        "| W / L / T | zero-shot |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in ("accuracy", "calibrated_accuracy"):
        for dataset in DATASETS:
            for epsilon in EPSILONS:
                for name in METHODS:
                    line = _accuracy_row(rows, zero.get(dataset), (dataset, epsilon, name), key)
                    if line:
                        lines.append(line)
    return "\n".join(lines)


def _accuracy_row(
    rows: list[dict[str, Any]], zero: dict[str, Any] | None, cell: tuple[str, float, str], key: str
) -> str | None:
    """One cell's row, or None if no seed has both sides."""
    paired = _paired(rows, cell)
    if not paired:
        return None
    before = np.array([p["before"][key] for p in paired]) * 100
    after = np.array([p["after"][key] for p in paired]) * 100
    diff = after - before
    zero_text = "-" if zero is None or zero[key] is None else f"{100 * zero[key]:.1f}"
    wlt = f"{(diff > 0).sum()} / {(diff < 0).sum()} / {(diff == 0).sum()}"
    dataset, epsilon, name = cell
    label = name if key == "accuracy" else f"{name}, calibrated"
    return (
        f"| {dataset} | {epsilon:g} | {label} | {len(paired)} | {_mean_se(before)} | "
        f"{_mean_se(after)} | {_mean_se(diff, '+')} | {wlt} | {zero_text} |"
    )


def _paired(rows: list[dict[str, Any]], cell: tuple[str, float, str]) -> list[dict[str, Any]]:
    """The seeds of ``cell`` that have a run on both sides (the last run of each wins)."""
    by_seed: dict[int, dict[str, Any]] = {}
    for row in rows:
        if (row["dataset"], row["epsilon"], row["method"]) == cell:
            by_seed.setdefault(row["seed"], {})[row["side"]] = row
    return [runs for _, runs in sorted(by_seed.items()) if set(SIDES) <= set(runs)]


def _mean_se(values: np.ndarray, sign: str = "") -> str:
    """``mean ± SE`` (the mean alone for one seed: no SE)."""
    mean = f"{values.mean():{sign}.1f}"
    return f"{mean} ± {_se(values):.1f}" if values.size > 1 else f"{mean} (1 seed)"


def _se(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan


# ---------------------------------------------------------------------------- plumbing


def _side_env(side: str) -> dict[str, str]:
    """The environment of a process on ``side``'s code: its tree first on the path."""
    tree = ROOT if side == "after" else Path(os.environ.get("EVIDENCE_BEFORE", "/tmp/before"))
    if not (tree / "app").is_dir():
        raise SystemExit(f"no code at {tree}: git worktree add {tree} 239348f")
    data = os.environ.get("DATA_DIR", str(ROOT.parent / "shared" / "data"))
    return {**os.environ, "PYTHONPATH": str(tree), "DATA_DIR": data}


def _result(lines: Iterator[str] | list[str]) -> dict[str, Any]:
    """The first RESULT line's JSON among ``lines``."""
    for line in lines:
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    raise RuntimeError("the child process gave no result (see its messages above)")


def _append(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write(json.dumps(row) + "\n")


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.open() if line.strip()]


def _cells(cells: dict[tuple[str, float, str], Any]) -> list[tuple[str, float]]:
    """The (dataset, epsilon) pairs present, in the grid's order."""
    present = {(d, e) for d, e, _ in cells}
    return [(d, e) for d in DATASETS for e in EPSILONS if (d, e) in present]


def _plan_cells(plans: list[dict[str, Any]]) -> list[tuple[str, float, str]]:
    present = {(p["dataset"], p["epsilon"], p["method"]) for p in plans}
    grid = [(d, e, m) for m in METHODS for d in DATASETS for e in EPSILONS]
    return [cell for cell in grid if cell in present]


def _log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _seeds(text: str) -> list[int]:
    """``0-4`` or ``0,3,7``."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(part) for part in text.split(",")]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--part", choices=("all", "plan", "accuracy", "tables"), default="all")
    parser.add_argument("--datasets", type=lambda s: s.split(","), default=list(DATASETS))
    parser.add_argument(
        "--epsilons", type=lambda s: [float(e) for e in s.split(",")], default=list(EPSILONS)
    )
    parser.add_argument(
        "--tang-draws", type=int, default=15, help="Tang jobs planned in full per cell"
    )
    parser.add_argument(
        "--ada-draws", type=int, default=2, help="AdaDPSyn jobs planned in full per cell"
    )
    parser.add_argument(
        "--rate-draws", type=int, default=10000, help="Tang jobs per cell for the rate-1 share"
    )
    parser.add_argument("--seeds", type=_seeds, default=_seeds("0-4"), help="part B's seeds")
    parser.add_argument("--test-size", type=int, default=100, help="part B's test queries")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON lines go")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rate-cell", help=argparse.SUPPRESS)
    parser.add_argument("--plan-side", action="store_true", help=argparse.SUPPRESS)
    return parser


def _child(args: argparse.Namespace) -> None:
    """What a process started on one side's code does."""
    if args.worker:
        worker(args.side)
    elif args.rate_cell:
        dataset, epsilon, draws = args.rate_cell.split(":")
        _skip_calibration(args.side)
        print(RESULT + json.dumps(_rate_cell(args.side, dataset, float(epsilon), int(draws))))
    else:
        plan_side(args.side, args)


def _plan_both(args: argparse.Namespace) -> None:
    """Part A: both sides at once, each in its own process."""
    argv = [
        f"--datasets={','.join(args.datasets)}",
        f"--epsilons={','.join(map(str, args.epsilons))}",
    ]
    argv += [
        f"--tang-draws={args.tang_draws}",
        f"--ada-draws={args.ada_draws}",
        f"--rate-draws={args.rate_draws}",
    ]
    command = [sys.executable, __file__, "--plan-side", f"--out={OUT}", *argv]
    children = [subprocess.Popen([*command, "--side", side], env=_side_env(side)) for side in SIDES]
    if any(child.wait() for child in children):
        raise SystemExit("part A failed (see the messages above)")


def main(argv: list[str] | None = None) -> int:
    global OUT
    args = _parser().parse_args(argv)
    OUT = args.out
    if args.side is not None:
        _child(args)
        return 0
    started = time.perf_counter()
    if args.part in ("all", "plan"):
        _plan_both(args)
    if args.part in ("all", "accuracy"):
        accuracy(args)
    text = tables()
    (OUT / "tables.md").write_text(text)
    print(text)
    _log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
