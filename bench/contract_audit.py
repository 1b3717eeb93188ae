"""The method contract's empirical audit (app/contract.py): its power and its time.

Runs the contract's add/remove audit clause, at its default run count, on the noisy-majority
test plug-in (tests/methods/noisy_max.py) with every release under-priced by a factor (1:
honest), and its replace-one clause on the plug-in whose replace-one sensitivity is stated 1
instead of 2, each with several seed offsets; prints the share of audits that fail the
method and the seconds one audit takes. Exits 1 if an honest audit fails or a factor-2
under-pricing passes.

    .venv/bin/python bench/contract_audit.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.methods.noisy_max import NoisyMajority
from tests.methods.test_contract_outputs import TestNoisyMajority

CLAUSES = {
    "add/remove": "test_the_outputs_show_no_more_than_add_or_remove_charges",
    "replace-one": "test_the_outputs_show_no_more_than_replace_one_charges",
}


def caught(method: NoisyMajority, clause: str, offset: int) -> tuple[bool, float]:
    """Whether the clause fails ``method`` with seeds from ``offset``, and its seconds."""
    attrs = {"method": method, "audit_seed": 10_000 + 100_000 * offset}
    contract = type("Contract", (TestNoisyMajority,), attrs)()
    start = time.perf_counter()
    try:
        getattr(contract, clause)()
    except AssertionError:
        return True, time.perf_counter() - start
    return False, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    rows, ok = [], True
    cases = [
        ("add/remove", f"under-priced x{f:g}", NoisyMajority(factor=f)) for f in (1, 1.5, 2, 3)
    ]
    cases.append(("replace-one", "honest", NoisyMajority()))
    cases.append(("replace-one", "sensitivity 1, not 2", NoisyMajority("replace_one_sensitivity")))
    for relation, case, method in cases:
        runs = [caught(method, CLAUSES[relation], offset) for offset in range(args.repeats)]
        failed = sum(hit for hit, _ in runs)
        seconds = sorted(s for _, s in runs)[len(runs) // 2]
        rows.append(f"| {relation} | {case} | {failed}/{len(runs)} | {seconds:.1f} |")
        honest = case in ("under-priced x1", "honest")
        ok &= (failed == 0) if honest else (failed == len(runs) or "x1.5" in case)
    print("| audit | method | failed the contract | s per audit (median) |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print("verdict:", "as expected" if ok else "MISSED: an honest audit failed or a 2x passed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
