"""Compute the planner's shipped table: its choices for the shapes that matter, ahead.

Why. A never-seen shape costs the planner 2-8 s of simulation on one core (more at larger M
and K), on the request path of a quote or a submission; the table answers the shapes that
the service and the evaluations use by default in a dictionary lookup. Its entries are
exactly :func:`app.privacy.planner.choose`'s (a function of public numbers only: M, K and
the grid bucket of Tang's multiplier), and the file records the planner's fingerprint, so a
changed planner ignores a stale table rather than serving choices it would not make
(tests/privacy/test_planner_table.py fails until it is computed again).

Run (about 4 minutes on one core; each shape is written as it is done, beside those the
file holds; ``--shapes 10:100,6:50`` computes those only)::

    python -m app.synthesis.planner_table
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from app.privacy import planner
from app.synthesis.config import DEFAULT_K, GENERIC_DEFAULTS, TASK_DEFAULTS

#: The quick evaluation profile's K (app.eval.experiment.QUICK_PARAMS) and its M for AG News.
QUICK_K = 50
QUICK_AGNEWS_M = 6


#: Larger M is left to be planned on first use (about 16 s at M 40 / K 100, then remembered
#: by the database). The MIT tasks' M 40 is computed ahead: a 16-second plan does not belong
#: on a request path shared by tenants.
LARGEST_M = 40


def shapes() -> list[tuple[int, int]]:
    """(M, K): every built-in task's default M up to :data:`LARGEST_M` and the generic one,
    at the service's K and at the quick profile's; the most used first (custom tasks,
    TREC)."""
    Ms = [GENERIC_DEFAULTS["M"], *sorted({d["M"] for d in TASK_DEFAULTS.values()})]
    ordered = [M for M in dict.fromkeys([*Ms, QUICK_AGNEWS_M]) if M <= LARGEST_M]
    return [(M, DEFAULT_K) for M in ordered if M != QUICK_AGNEWS_M] + [
        (M, QUICK_K) for M in ordered
    ]


#: Tang's multipliers covered: epsilon about 0.1 (a label of 86 records, M 20) to 30.
SIGMA_RANGE = (0.2, 80.0)


def buckets() -> range:
    """The grid buckets of :data:`SIGMA_RANGE`."""
    low, high = (round(math.log(s) / math.log(planner.SIGMA_GRID)) for s in SIGMA_RANGE)
    return range(low, high + 1)


def entry(M: int, K: int, span: range) -> dict[str, Any]:
    """One shape's choices over ``span``, as the table stores them."""
    index = {candidate: i for i, candidate in enumerate(planner.CANDIDATES)}
    choices = planner.choose_many(M, K, span)
    return {
        "M": M,
        "K": K,
        "first_bucket": span.start,
        "choices": [[index[c.candidate], c.agreement, c.tang_agreement] for c in choices.values()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", help="M:K,M:K,... (default: the shapes that matter)")
    args = parser.parse_args()
    wanted = (
        [tuple(int(v) for v in item.split(":")) for item in args.shapes.split(",")]
        if args.shapes
        else shapes()
    )
    document = _current()
    for M, K in wanted:
        started = time.perf_counter()
        others = [s for s in document["shapes"] if (s["M"], s["K"]) != (M, K)]
        document["shapes"] = [*others, entry(M, K, buckets())]
        planner.TABLE.write_text(json.dumps(document, separators=(",", ":")) + "\n")
        print(f"M {M} K {K}: {len(buckets())} buckets, {time.perf_counter() - started:.0f} s")


def _current() -> dict[str, Any]:
    """The table on disk if this planner computed it over today's range (its shapes are
    kept), else an empty one."""
    empty = {
        "fingerprint": planner.fingerprint(),
        "generated_by": "python -m app.synthesis.planner_table",
        "shapes": [],
    }
    try:
        document = json.loads(planner.TABLE.read_text())
    except FileNotFoundError:
        return empty
    same_range = all(s["first_bucket"] == buckets().start for s in document["shapes"])
    if document.get("fingerprint") != empty["fingerprint"] or not same_range:
        return empty
    return {**document, "generated_by": empty["generated_by"]}


if __name__ == "__main__":
    main()
