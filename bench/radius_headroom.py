"""Benchmark: how much a coverage check could ever win, on aggregation_fidelity's 400 cells.

Run: .venv/bin/python bench/radius_headroom.py        (about 2 minutes, 2 cores)

Not a mechanism: a measurement of headroom, to say where AdaDPSyn's gains over Tang's mean
can come from. Each cell has Tang's calibrated multiplier sigma (the whole step's budget,
mu^2 = 1 / sigma^2). Two one-round designs split that budget between a first unprojected mean
(share ``a``) and a second mean projected onto a ball around the first mean's projection onto
the simplex, pooled by inverse variance as the pooled aggregator pools:

* ``oracle``: the ball's radius is the exact distance to the farthest teacher, known for
  free. This is NOT private (the radius is read from the data, no noise, no charge): it
  bounds what a check that keeps every teacher in its ball could give, since a real check
  pays part of the budget and only estimates this radius.
* ``fixed``: the radius is a public constant (a shrink of sqrt(2)/2), with no check at all.
  This is private (a public radius, sensitivity 2R/M), but teachers outside the ball are
  pulled towards a noisy centre.

For each design, the share ``a`` and the constant are the grid point with the best mean
gain over the five regimes, chosen per job shape (M, K, epsilon, labels) on the same steps it
is scored on, as a planner that knew these regimes would choose: both numbers are upper
bounds of their designs. A cell (shape and regime) is won or lost when the gain over Tang on
the same noise draws is beyond 2 paired SE, as in aggregation_fidelity.py.
"""

from __future__ import annotations

import math
import sys
from collections import Counter

import numpy as np
from aggregation_fidelity import REGIMES, SHAPES, se, shape, teachers

from app.privacy.geometry import SIMPLEX_RADIUS, project_onto_ball, project_onto_simplex
from app.privacy.planner import tang_multiplier

STEPS = 1000
SHARES = (0.2, 0.35, 0.5, 0.65, 0.8)
SHRINKS = (0.3, 0.5, 0.7)


def one_round(
    sets: np.ndarray, sigma: float, a: float, radius: np.ndarray | float, z: np.ndarray
) -> np.ndarray:
    """Argmax of two pooled means: unprojected at share a, projected at radius after it."""
    M = sets.shape[1]
    mean = sets.mean(axis=1)
    s1, s2 = sigma / math.sqrt(a), sigma / math.sqrt(1.0 - a)
    first = mean + math.sqrt(2.0) * s1 / M * z[0]
    centre = project_onto_simplex(first)
    r = np.broadcast_to(np.asarray(radius, dtype=float), (sets.shape[0],))
    projected = project_onto_ball(sets, centre[:, None, :], r[:, None, None]).mean(axis=1)
    second = projected + (2.0 * r * s2 / M)[:, None] * z[1]
    w1, w2 = 1.0 / (2.0 * SIMPLEX_RADIUS**2 * s1**2), 1.0 / (4.0 * r**2 * s2**2)
    return ((w1 * first + w2[:, None] * second) / (w1 + w2)[:, None]).argmax(-1)


def gains(sets: np.ndarray, sigma: float, design: str, z: np.ndarray) -> list[np.ndarray]:
    """Per grid point of the design: 1/0/-1 per step, its argmax right minus Tang's."""
    M = sets.shape[1]
    clean = sets.mean(axis=1).argmax(-1)
    tang = ((sets.mean(axis=1) + math.sqrt(2.0) * sigma / M * z[0]).argmax(-1) == clean) * 1.0
    out = []
    for a in SHARES:
        if design == "oracle":
            centre = project_onto_simplex(sets.mean(axis=1) + math.sqrt(2 / a) * sigma / M * z[0])
            far = np.linalg.norm(sets - centre[:, None, :], axis=-1).max(axis=1)
            radii: list[np.ndarray | float] = [np.minimum(far, SIMPLEX_RADIUS)]
        else:
            radii = [s * SIMPLEX_RADIUS for s in SHRINKS]
        out.extend((one_round(sets, sigma, a, r, z) == clean) - tang for r in radii)
    return out


def main() -> int:
    """Per shape, the grid point with the best mean gain over the five regimes (in-sample)."""
    sets = {
        (regime, K, M): teachers(
            regime, M, K, STEPS, np.random.default_rng([0, K, M, REGIMES.index(regime), 7])
        )
        for regime in REGIMES
        for K in (50, 100)
        for M in (10, 20)
    }
    z = {K: np.random.default_rng(1).normal(size=(2, STEPS, K)) for K in (50, 100)}
    won: dict[str, Counter[tuple[int, float]]] = {"oracle": Counter(), "fixed": Counter()}
    lost: dict[str, Counter[tuple[int, float]]] = {"oracle": Counter(), "fixed": Counter()}
    for K in (50, 100):
        for M in (10, 20):
            for labels in SHAPES:
                for epsilon in (0.5, 1.0, 2.0, 4.0, 8.0):
                    sigma = tang_multiplier(shape(labels, M, K, epsilon))
                    for design in won:
                        per_regime = [gains(sets[r, K, M], sigma, design, z[K]) for r in REGIMES]
                        point = int(
                            np.argmax(np.mean([[d.mean() for d in g] for g in per_regime], 0))
                        )
                        diffs = [g[point] for g in per_regime]
                        won[design][(M, epsilon)] += sum(d.mean() > 2 * se(d) for d in diffs)
                        lost[design][(M, epsilon)] += sum(d.mean() < -2 * se(d) for d in diffs)
    print("| M | ε | cells | oracle radius: won, lost | fixed radius, no check: won, lost |")
    print("|---|---|---|---|---|")
    for key in sorted(won["oracle"] | won["fixed"] | lost["oracle"] | lost["fixed"]):
        M, epsilon = key
        print(
            f"| {M} | {epsilon:g} | 40 | {won['oracle'][key]}, {lost['oracle'][key]} "
            f"| {won['fixed'][key]}, {lost['fixed'][key]} |"
        )
    for design in won:
        print(
            f"{design}: ahead by more than 2 paired SE in {sum(won[design].values())} of 400 "
            f"cells, behind by more than 2 paired SE in {sum(lost[design].values())}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
