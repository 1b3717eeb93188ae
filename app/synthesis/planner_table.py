"""Compute the planner's shipped table: its choices for the shapes that matter, ahead.

Why. A never-seen shape costs the planner 2-8 s of simulation on one core (more at larger M
and K), on the request path of a quote or a submission; the table answers the shapes that
the service and the evaluations use by default in a dictionary lookup, and, as anchors,
every other shape the service accepts (``planner.nearest_choice``). Its entries are
exactly :func:`app.privacy.planner.choose`'s (a function of public numbers only: M, K and
the grid bucket of Tang's multiplier), and the file records the planner's fingerprint, so a
changed planner ignores a stale table rather than serving choices it would not make
(tests/privacy/test_planner_table.py fails until it is computed again).

Run (about 40 minutes on one core, most of it the anchors at K 500 and 1000; each shape is
written as it is done, beside those the file holds; ``--shapes 10:100,6:50`` computes those
only)::

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


#: The defaults computed ahead go up to this M (the MIT tasks' 40); a larger M, like every
#: shape the table does not hold, is read from the table's nearest shape
#: (:func:`app.privacy.planner.nearest_choice`), never simulated on a request path.
LARGEST_M = 40


#: Anchors for every other shape the service accepts (M 1-200, K 2-1000), which the planner
#: reads from the table's nearest shape (:func:`app.privacy.planner.nearest_choice`): K from
#: 2 to 1000 (no accepted K is more than 1.6 times from one of these or the defaults' K),
#: at each M of :data:`ANCHOR_MS` up to its largest K. The small Ms have anchors of their
#: own because there the teachers' own spread averages out least, so the scaling by M
#: from another M misses most (bench/planner_anchors.py); M 40 stops at K 200 (a
#: simulation at M 40 / K 1000 takes about 10 minutes).
ANCHOR_KS = (2, 5, 10, 20, 200, 500, 1000)
ANCHOR_MS = {2: 1000, 3: 100, 4: 100, 5: 100, 10: 1000, 40: 200}


def shapes() -> list[tuple[int, int]]:
    """(M, K): every built-in task's default M up to :data:`LARGEST_M` and the generic one,
    at the service's K and at the quick profile's, the most used first (custom tasks,
    TREC); then the anchors (:data:`ANCHOR_KS` at :data:`ANCHOR_MS`)."""
    Ms = [GENERIC_DEFAULTS["M"], *sorted({d["M"] for d in TASK_DEFAULTS.values()})]
    ordered = [M for M in dict.fromkeys([*Ms, QUICK_AGNEWS_M]) if M <= LARGEST_M]
    defaults = [(M, DEFAULT_K) for M in ordered if M != QUICK_AGNEWS_M] + [
        (M, QUICK_K) for M in ordered
    ]
    Ks = sorted({*ANCHOR_KS, QUICK_K, DEFAULT_K})
    anchors = [(M, k) for M, largest in ANCHOR_MS.items() for k in Ks if k <= largest]
    return list(dict.fromkeys([*defaults, *anchors]))


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
