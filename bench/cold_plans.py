"""Benchmark: what a never-seen job shape costs to plan, in a fresh process (issue 42).

Run: .venv/bin/python bench/cold_plans.py

For TREC's label sizes and a few epsilons no cache has seen, it times Tang's multiplier (the
noise calibrated to the epsilon) and AdaDPSyn's planner choice: for a shape in the shipped
table (M 10 or 20 at K 100, M 6, 10 or 20 at K 50) the choice is a lookup, and since issue 53
so it is for one outside it (M 7, M 200 / K 1000: read from the table's nearest shape,
``planner.nearest_choice``; bench/cold_shapes.py times them on a server). Exit status 1 when
a shape takes a second or more.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.privacy.planner import PlannerShape, plan_adadpsyn, tang_multiplier

TREC = {"ABBR": 86, "DESC": 1162, "ENTY": 1250, "HUM": 1223, "LOC": 835, "NUM": 896}
CASES = [(20, 100, 1.2345), (20, 100, 3.3333), (10, 100, 0.777), (10, 50, 2.2222), (7, 100, 1.2345)]
CASES += [(7, 50, 1.2345), (30, 100, 2.5), (200, 1000, 1.2345)]


def main() -> int:
    slow = []
    for M, K, epsilon in CASES:
        shape = PlannerShape(
            M=M, K=K, N=2, tmax=15, label_sizes=TREC, shots=dict.fromkeys(TREC, 1),
            epsilon=epsilon, delta=1e-6,
        )  # fmt: skip
        started = time.perf_counter()
        tang_multiplier(shape)
        calibrated = time.perf_counter() - started
        started = time.perf_counter()
        choice = plan_adadpsyn(shape)
        planned = time.perf_counter() - started
        print(
            f"M {M} K {K} epsilon {epsilon}: Tang's multiplier {calibrated * 1000:.0f} ms, "
            f"the planner's choice {planned * 1000:.0f} ms (T {choice.candidate.T}, "
            f"clip {choice.candidate.clip})"
        )
        if calibrated + planned >= 1.0:
            slow.append((M, K, epsilon))
    print("OK" if not slow else f"MISS: {slow} took a second or more")
    return 1 if slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
