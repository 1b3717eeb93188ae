"""Planned AdaDPSyn against Tang et al. on downstream accuracy, paired by seed, with the
planner's choice for every seed (issue 33: "never worse than Tang").

Run: .venv/bin/python bench/paired_accuracy.py --dataset trec14 --epsilon 1 --seeds 0-24 \
         --out out/paired/trec14-e1.jsonl        (about 40 s a run on 2 idle cores)
     .venv/bin/python bench/paired_accuracy.py --summary out/paired/trec14-e1.jsonl

Each seed runs both methods as ``dpsyn eval --quick`` runs them (:func:`app.eval.experiment.
run_one`: the quick profile, 100 fixed test queries, the given shots) with the same seed, so
both plan with the same label schedule and the same released label counts; AdaDPSyn's planner
choice (clip radius, checks, Tang's multiplier) is recorded beside each run, which
``dpsyn eval`` does not keep. Runs are appended to the JSONL file as they end, so a long run
can be summarised, or resumed with the seeds it lacks. The summary prints the mean accuracy
of each method, raw and with contextual calibration, the paired difference with its standard
error, and wins, losses and ties.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import app.synthesis.generator as generator
from app.eval.datasets import default_data_dir, load_split
from app.eval.experiment import ExperimentConfig, Setting, pick_test_subset, run_one
from app.llm.factory import BackendKind, make_backend
from app.privacy.planner import Choice, choose_at
from app.synthesis.tasks import BUILTIN_TASKS

METHODS = ("tang", "adadpsyn")


def _recording_planner(into: dict[str, Any]) -> None:
    """Have the token loop's planning note the planner's choice in ``into`` (public stats)."""

    def plan(M: int, K: int, sigma: float) -> Choice:
        choice = choose_at(M, K, sigma)
        into.update(choice.public_stats())
        return choice

    generator.choose_at = plan


def run(dataset: str, epsilon: float, seeds: list[int], shots: int, out: Path) -> None:
    """Both methods at every seed, each run appended to ``out`` as one JSON line."""
    task = BUILTIN_TASKS[dataset]
    train, test = load_split(dataset, default_data_dir())
    config = ExperimentConfig.quick(dataset, seeds=tuple(seeds), shots=shots, baselines=False)
    queries = pick_test_subset(test, config.test_size)
    backend = make_backend(BackendKind.TRANSFORMERS, model=None, url=None)
    chosen: dict[str, Any] = {}
    _recording_planner(chosen)
    out.parent.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for method in METHODS:
            chosen.clear()
            started = time.perf_counter()
            setting = Setting(kind=method, method=method, epsilon=epsilon)
            result = run_one(task, train, queries, setting, seed, backend, config)
            row = {**dataclasses.asdict(result), "dataset": dataset, "plan": dict(chosen)}
            with out.open("a") as file:
                file.write(json.dumps(row) + "\n")
            print(
                f"{method} seed {seed}: {result.accuracy:.2f} "
                f"(calibrated {result.calibrated_accuracy}), clip "
                f"{chosen.get('planner_clip', '-')}, {time.perf_counter() - started:.0f} s",
                flush=True,
            )


def _paired(rows: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """seed -> method -> run, for the seeds that have both methods (the last run wins)."""
    by_seed: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_seed.setdefault(row["seed"], {})[row["method"]] = row
    return {seed: runs for seed, runs in sorted(by_seed.items()) if set(METHODS) <= set(runs)}


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    paired = _paired(rows)
    print(f"{path}: {len(paired)} seeds with both methods")
    print("| accuracy | Tang | AdaDPSyn | paired difference | W / L / T |")
    print("|---|---|---|---|---|")
    for key in ("accuracy", "calibrated_accuracy"):
        tang = np.array([runs["tang"][key] for runs in paired.values()]) * 100
        ours = np.array([runs["adadpsyn"][key] for runs in paired.values()]) * 100
        diff = ours - tang
        print(
            f"| {key.replace('_', ' ')} | {tang.mean():.1f} ± {_se(tang):.1f} | "
            f"{ours.mean():.1f} ± {_se(ours):.1f} | {diff.mean():+.1f} ± {_se(diff):.1f} | "
            f"{(diff > 0).sum()} / {(diff < 0).sum()} / {(diff == 0).sum()} |"
        )
    plans = [runs["adadpsyn"]["plan"] for runs in paired.values()]
    shown = [str(p.get("planner_clip") or "none") if p else "?" for p in plans]
    print("planner clip per seed (?: not recorded):", ", ".join(shown))


def _se(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan


def _seeds(text: str) -> list[int]:
    """``0-24`` or ``0,3,7``."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(part) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="trec14", choices=sorted(BUILTIN_TASKS))
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", default="0-24")
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("out/paired/runs.jsonl"))
    parser.add_argument("--summary", type=Path, help="summarise this JSONL file and exit")
    args = parser.parse_args(argv)
    if args.summary is not None:
        summary(args.summary)
        return 0
    run(args.dataset, args.epsilon, _seeds(args.seeds), args.shots, args.out)
    summary(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
