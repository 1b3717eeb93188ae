"""Why AG News scored lower after issue 41's count release (docs/results.md, "Part B,
continued"): the same quick runs as ``bench/count_release_evidence.py``'s part B, on the
current code with one later change undone at a time, beside the code before (239348f).

Run (from the repository root; the code before in a worktree of its own):

    git worktree add /tmp/before 239348f
    nice -n 19 .venv/bin/python bench/agnews_ablation.py --seeds 0-4
    .venv/bin/python bench/agnews_ablation.py --table

Variants (each a worker process of its own, two at a time):

- ``before``: the code of 239348f (one count release per job, one multiplier for all labels).
- ``after``: the current code as shipped.
- ``all_tokens``: the current code, the local backend's candidate vocabulary with every
  token (the text-only filter of issue 43 undone).
- ``min_words_1``: the current code, one-word demonstrations kept (``min_words`` 1; the
  label-echo rule stays).

Rows (with each run's demonstrations) go to ``out/evidence/agnews_ablation.jsonl``; a rerun
skips the runs it holds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import count_release_evidence as evidence

OUT = evidence.OUT / "agnews_ablation.jsonl"
VARIANTS = ("before", "after", "all_tokens", "min_words_1")


def _patch(variant: str) -> None:
    """Undo one change in this (current-code) worker process."""
    if variant == "all_tokens":
        import torch

        from app.llm.transformers_backend import TransformersBackend

        TransformersBackend.non_text_ids = property(  # type: ignore[assignment]
            lambda self: torch.zeros(0, dtype=torch.long)
        )
    if variant == "min_words_1":
        from app.eval import experiment

        experiment.QUICK_PARAMS = {**experiment.QUICK_PARAMS, "min_words": 1}


def worker(variant: str) -> None:
    """Answer run requests (JSON lines on stdin) with RESULT lines."""
    _patch(variant)
    kept = evidence._capture_results()
    from app.eval import experiment

    original = experiment.run_one
    runs: list[Any] = []

    def run_one(*args: Any, **kwargs: Any) -> Any:
        runs.append(original(*args, **kwargs))
        return runs[-1]

    experiment.run_one = run_one
    for line in sys.stdin:
        request = json.loads(line)
        runs.clear()
        row = evidence._accuracy_run(request, kept)
        row["demonstrations"] = runs[-1].demonstrations if runs else []
        if kept:
            row["stats"] = {
                k: v
                for k, v in kept[0].stats.items()
                if "demonstration" in k or k == "planner_clip"
            }
        print(evidence.RESULT + json.dumps({**row, "variant": variant}), flush=True)


def _start(variant: str) -> subprocess.Popen[str]:
    side = "before" if variant == "before" else "after"
    command = [sys.executable, __file__, "--worker", variant]
    env = {**evidence._side_env(side), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _ask(process: subprocess.Popen[str], request: dict[str, Any]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    return evidence._result(iter(process.stdout.readline, ""))


def _run_variants(variants: list[str], args: argparse.Namespace, lock: threading.Lock) -> None:
    done = {(r["variant"], r["seed"]) for r in evidence._rows(OUT)}
    for variant in variants:
        todo = [s for s in args.seeds if (variant, s) not in done]
        if not todo:
            continue
        process = _start(variant)
        for seed in todo:
            request = {"dataset": "agnews", "method": args.method, "epsilon": args.epsilon,
                       "seed": seed, "test_size": 100}  # fmt: skip
            row = _ask(process, request)
            with lock:
                evidence._append(OUT, row)
            evidence._log(
                f"{variant} seed {seed}: {row['accuracy']:.2f} "
                f"(cal {row['calibrated_accuracy']}) {row['seconds']:.0f} s"
            )
        assert process.stdin is not None
        process.stdin.close()
        process.wait()


def table() -> str:
    rows = evidence._rows(OUT)
    lines = [
        "| variant | seeds | accuracy | calibrated | − before, paired (calibrated) |",
        "|---|---|---|---|---|",
    ]
    before = {r["seed"]: r for r in rows if r["variant"] == "before"}
    for variant in VARIANTS:
        mine = {r["seed"]: r for r in rows if r["variant"] == variant}
        if not mine:
            continue
        acc = np.array([100 * r["accuracy"] for r in mine.values()])
        cal = np.array([100 * r["calibrated_accuracy"] for r in mine.values()])
        paired = np.array(
            [
                100 * (r["calibrated_accuracy"] - before[s]["calibrated_accuracy"])
                for s, r in mine.items()
                if s in before
            ]
        )
        diff = evidence._mean_se(paired, "+") if variant != "before" and paired.size else "-"
        lines.append(
            f"| {variant} | {len(mine)} | {evidence._mean_se(acc)} | "
            f"{evidence._mean_se(cal)} | {diff} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=evidence._seeds, default=evidence._seeds("0-4"))
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    parser.add_argument("--method", default="adadpsyn")
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--worker", choices=VARIANTS)
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--out", type=Path, help="where the rows go (default: OUT)")
    args = parser.parse_args()
    global OUT
    OUT = args.out or OUT
    if args.worker:
        worker(args.worker)
        return 0
    if not args.table:
        lock = threading.Lock()
        halves = [args.variants[0::2], args.variants[1::2]]
        threads = [threading.Thread(target=_run_variants, args=(h, args, lock)) for h in halves]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
