"""The empirical audit's power (issue 52): how often app/privacy/empirical.py catches a method
that charges epsilon 1 but spends more, by run count, and what its statistics cost.

Two simulated methods, each run on neighbours D and D' (numpy, seeded), audited at alpha 0.05
and delta 1e-5 against a claimed epsilon of 1; a factor f means the method really spends
f times what it charges:

* randomized response: 4 labels, the true one kept with probability e^eps / (e^eps + 3) at
  eps = f (D's label 0, D''s label 1): the pair realises the whole epsilon;
* report noisy max over 2 label counts, D (20, 18) and D' (20, 17) (one record of label 1
  removed): the honest method releases one noisy argmax with Laplace noise of scale 1/eps;
  the buggy one releases ceil(f) of them, each at eps f / ceil(f), and charges for one. The
  output is the tuple of labels ("noisy max"), or, through a coarser view, how many of them
  are the second label ("noisy max, counted"). Unlike randomized response, this pair
  realises only part of the epsilon spent (the "pair's own epsilon" below, computed
  exactly): the most any audit of this pair can show.

A cell is the share of repetitions whose bound exceeds the claimed epsilon, with the mean
bound; the last column the mean seconds one call of ``epsilon_lower_bound`` takes (both
samples given, simulation not counted). Exits 1 if honest methods are flagged more often
than alpha allows (one-sided binomial test at 1e-3) or randomized response at factor 2 is
caught in fewer than 19 of 20 audits at 2000 runs.

    .venv/bin/python bench/empirical_audit.py    # ~1 min on 2 cores
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.privacy.empirical import epsilon_lower_bound

ALPHA, DELTA, CLAIMED = 0.05, 1e-5, 1.0
FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0)
RUN_COUNTS = (500, 2000, 5000, 10000)
LABELS = 4  # randomized response's
COUNTS = {"D": (20, 18), "D'": (20, 17)}  # noisy max's two label counts

Runs = list[Mapping[str, Hashable]]
Method = Callable[[float, str, int, np.random.Generator], Runs]


def randomized_response(epsilon: float, dataset: str, runs: int, rng: np.random.Generator) -> Runs:
    value = 0 if dataset == "D" else 1
    keep = rng.random(runs) < math.exp(epsilon) / (math.exp(epsilon) + LABELS - 1)
    other = rng.integers(0, LABELS - 1, size=runs)
    other += other >= value
    return [{"label": label} for label in np.where(keep, value, other).tolist()]


def noisy_labels(epsilon: float, dataset: str, runs: int, rng: np.random.Generator) -> list:
    """ceil(epsilon / CLAIMED) noisy argmaxes per run, each at epsilon / shots (docstring)."""
    shots = math.ceil(epsilon / CLAIMED - 1e-9)
    noisy = np.array(COUNTS[dataset]) + rng.laplace(0.0, shots / epsilon, size=(runs, shots, 2))
    return noisy.argmax(axis=-1).tolist()


def noisy_max(epsilon: float, dataset: str, runs: int, rng: np.random.Generator) -> Runs:
    return [{"labels": tuple(run)} for run in noisy_labels(epsilon, dataset, runs, rng)]


def noisy_max_counted(epsilon: float, dataset: str, runs: int, rng: np.random.Generator) -> Runs:
    """The same outputs through a coarser view: how many shots gave the second label."""
    return [{"second labels": sum(run)} for run in noisy_labels(epsilon, dataset, runs, rng)]


def second_wins(gap: float, scale: float) -> float:
    """P(the second label's noisy count beats the first's, ``gap`` votes ahead): the tail of
    the difference of two Laplace(scale) variables."""
    return 0.5 * math.exp(-gap / scale) * (1.0 + gap / (2.0 * scale))


def noisy_max_own_epsilon(epsilon: float) -> float:
    """The largest log-ratio of any output of :func:`noisy_max` between D and D' (exact):
    shots times the larger one-shot log-ratio, its labels being independent."""
    shots = math.ceil(epsilon / CLAIMED - 1e-9)
    scale = shots / epsilon
    on_d = second_wins(COUNTS["D"][0] - COUNTS["D"][1], scale)
    on_d_prime = second_wins(COUNTS["D'"][0] - COUNTS["D'"][1], scale)
    one_shot = max(math.log(on_d / on_d_prime), math.log((1 - on_d_prime) / (1 - on_d)))
    return shots * one_shot


METHODS: dict[str, Method] = {
    "randomized response": randomized_response,
    "noisy max": noisy_max,
    "noisy max, counted": noisy_max_counted,
}


@dataclass(frozen=True)
class Row:
    """One method at one run count: per factor (audits caught, mean bound), and seconds."""

    method: str
    runs: int
    cells: list[tuple[int, float]]
    seconds: float


def audit(method: Method, factor: float, runs: int, seed: list[int]) -> tuple[float, float]:
    """One audit: (bound, seconds the statistics took)."""
    rng = np.random.default_rng(seed)
    first = method(factor * CLAIMED, "D", runs, rng)
    second = method(factor * CLAIMED, "D'", runs, rng)
    start = time.perf_counter()
    bound = epsilon_lower_bound(first, second, delta=DELTA, alpha=ALPHA).epsilon
    return bound, time.perf_counter() - start


def measure(repetitions: int) -> list[Row]:
    """One row per method and run count, each audit seeded by its place in the table."""
    rows = []
    for index, (name, method) in enumerate(METHODS.items()):
        for runs in RUN_COUNTS:
            cells, seconds = [], []
            for factor in FACTORS:
                results = [
                    audit(method, factor, runs, [index, runs, round(10 * factor), r])
                    for r in range(repetitions)
                ]
                bounds = [bound for bound, _ in results]
                seconds += [took for _, took in results]
                cells.append((sum(b > CLAIMED for b in bounds), float(np.mean(bounds))))
            rows.append(Row(name, runs, cells, float(np.mean(seconds))))
    return rows


def table(rows: list[Row], repetitions: int) -> str:
    head = " | ".join(f"×{f:g}" for f in FACTORS)
    lines = [
        f"| method | runs per dataset | {head} | s per audit |",
        "|---|---|" + "---|" * len(FACTORS) + "---|",
    ]
    for row in rows:
        text = " | ".join(f"{caught}/{repetitions} ({mean:.2f})" for caught, mean in row.cells)
        lines.append(f"| {row.method} | {row.runs} | {text} | {row.seconds:.3f} |")
    return "\n".join(lines)


def verdict(rows: list[Row], repetitions: int) -> tuple[bool, str]:
    """Honest methods within alpha's rate, and the power the test suite also asks for."""
    honest = sum(row.cells[0][0] for row in rows)
    audits = len(rows) * repetitions
    p_value = stats.binomtest(honest, audits, ALPHA, alternative="greater").pvalue
    rr_2000 = next(r for r in rows if r.method == "randomized response" and r.runs == 2000)
    caught = rr_2000.cells[FACTORS.index(2.0)][0]
    ok = p_value > 1e-3 and caught >= math.ceil(0.95 * repetitions)
    return ok, (
        f"honest methods flagged in {honest} of {audits} audits (binomial p = {p_value:.3g} "
        f"against alpha {ALPHA}); randomized response at ×2, 2000 runs: {caught}/{repetitions}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=20)
    repetitions = parser.parse_args().repetitions
    start = time.perf_counter()
    rows = measure(repetitions)
    print(table(rows, repetitions))
    own = ", ".join(f"×{f:g}: {noisy_max_own_epsilon(f * CLAIMED):.2f}" for f in FACTORS)
    print(f"\nnoisy max, the pair's own epsilon (the most an audit can show): {own}")
    ok, text = verdict(rows, repetitions)
    print(f"{'OK' if ok else 'MISSED'}: {text}; {time.perf_counter() - start:.0f} s in all")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
