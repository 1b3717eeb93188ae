"""Benchmark: what planning a shape off the table from its anchor costs in accuracy (issue 53).

Run: .venv/bin/python bench/planner_anchors.py [--shapes 7:50,10:77] [--json out.json]

A shape the planner's table does not hold is planned from the table's nearest shape, at
Tang's multiplier scaled by the ratio of the two Ms (:func:`app.privacy.planner.nearest_choice`).
For each shape of ``--shapes`` (none of them in the table) and Tang multipliers 0.5 to 32,
this runs the exact simulation of the shape (:func:`app.privacy.planner.choose_many`'s two
stages, seconds to minutes a shape) and prints, on the exact simulation's validation
teachers:

* whether the anchor's choice is the exact choice;
* the regret: the exact choice's simulated agreement (P(noisy argmax = clean argmax), the
  planner's objective) minus the anchor's choice's, in points;
* the anchor's choice against Tang's mean, in points, on average and in its worst
  population (regime or family member, both stages' steps), and whether the exact veto
  (:func:`app.privacy.planner._passes`: behind Tang's mean in no population by more than a
  paired SE and a tenth of a point) would have let it through.

Exit status 1 when the exact simulation's veto would refuse an anchor's choice, or one falls
behind Tang's mean by more than the veto's slack (a tenth of a point): the planner's promise
that a planned job is never worse than Tang's. The regret is reported, not a target.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.privacy import planner

SHAPES = [(1, 77), (3, 15), (4, 30), (6, 10), (7, 50), (10, 77), (25, 60), (30, 100)]
SHAPES += [(15, 150), (12, 300), (80, 100), (40, 300)]
SIGMAS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
SLACK_POINTS = 100 * planner.SLACK


def compare(M: int, K: int) -> list[dict]:
    """One row per multiplier: the anchor's choice against the exact one on (M, K)."""
    buckets = sorted({round(math.log(s) / math.log(planner.SIGMA_GRID)) for s in SIGMAS})
    sigmas = [planner.SIGMA_GRID**b for b in buckets]
    select = planner._stage_sums(M, K, sigmas, "select")
    validate = planner._stage_sums(M, K, sigmas, "validate")
    index = {candidate: i for i, candidate in enumerate(planner.CANDIDATES)}
    rows = []
    for b, (bucket, sigma) in enumerate(zip(buckets, sigmas, strict=True)):
        exact = planner._decide(select[b], validate[b], sigma)
        near = planner.nearest_choice(M, K, bucket)
        assert near is not None, "no table"
        i = index[near.candidate]
        both = select[b][i] + validate[b][i]  # the veto's steps: both stages'
        agreement = planner._agreement(validate[b][i])
        rows.append(
            {
                "M": M,
                "K": K,
                "sigma": round(sigma, 3),
                "exact_clip": exact.candidate.clip,
                "anchor_clip": near.candidate.clip,
                "regret_points": 100 * (exact.agreement - agreement),
                "vs_tang_points": 100 * (agreement - exact.tang_agreement),
                "veto_passes": i == 0 or planner._passes(both),
                "worst_population_points": 100 * float((both[:, 2] / both[:, 0]).min()),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="M:K,M:K,... (default: SHAPES)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    shapes = (
        [tuple(int(v) for v in item.split(":")) for item in args.shapes.split(",")]
        if args.shapes
        else SHAPES
    )
    rows = []
    print(f"{'M':>4} {'K':>5} {'anchor':>9} {'sigma':>6} {'exact':>6} {'anchor':>6} "
          f"{'regret':>7} {'vs Tang':>8} {'worst':>6} veto")  # fmt: skip
    for M, K in shapes:
        started = time.perf_counter()
        assert (M, K, 0) not in planner.shipped_choices(), f"M {M} K {K} is in the table"
        M_a, K_a = planner.anchor(M, K) or (0, 0)
        for row in compare(M, K):
            rows.append(row)
            print(f"{M:>4} {K:>5} {f'{M_a}/{K_a}':>9} {row['sigma']:>6.2f} "
                  f"{row['exact_clip'] or 'tang'!s:>6} {row['anchor_clip'] or 'tang'!s:>6} "
                  f"{row['regret_points']:>7.2f} {row['vs_tang_points']:>8.2f} "
                  f"{row['worst_population_points']:>6.2f} "
                  f"{'ok' if row['veto_passes'] else 'VETOED'}")  # fmt: skip
        print(f"     (the exact simulation of M {M} K {K}: {time.perf_counter() - started:.0f} s)")
    same = sum(r["exact_clip"] == r["anchor_clip"] for r in rows)
    regrets = sorted(r["regret_points"] for r in rows)
    print(f"same choice in {same} of {len(rows)}; regret median {regrets[len(rows) // 2]:.2f}, "
          f"largest {regrets[-1]:.2f} points; the exact veto would refuse "
          f"{sum(not r['veto_passes'] for r in rows)} of the anchor's choices")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    behind = [r for r in rows if not r["veto_passes"] or r["vs_tang_points"] < -SLACK_POINTS]
    print("OK" if not behind else f"MISS: {len(behind)} choices behind Tang's mean or vetoed")
    return 1 if behind else 0


if __name__ == "__main__":
    raise SystemExit(main())
