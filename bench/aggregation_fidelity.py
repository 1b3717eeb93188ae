"""Benchmark: argmax agreement of AdaDPSyn (pooled, planned) against Tang's mean at equal epsilon.

Run: .venv/bin/python bench/aggregation_fidelity.py              (about 2 minutes on 2 idle cores)
     .venv/bin/python bench/aggregation_fidelity.py --quick --steps 300   (a smoke run)

No model: synthetic M x K teacher distributions in five regimes of this file's own (the
planner, ``app/privacy/planner.py``, simulates different ones with other seeds, so this is
not the data it chose on):

* ``agreeing`` -- every teacher a Dirichlet draw around one Dirichlet(0.1)-peaked distribution;
* ``majority`` -- a confident majority (65%) on one token, the minority each on its own token;
* ``split`` -- 60% of the teachers around one peaked distribution, 40% around another;
* ``diffuse`` -- teachers around one flat distribution (no clear next token);
* ``close`` -- every teacher near one distribution whose top two tokens are close.

Job shapes where many-label custom tasks live: 2, 4, 6 and 14 labels with a few hundred
records each, 4 shots over the labels (1 or 2 per label), N 2, T_max 30, delta 1/n, tight
accounting; epsilon 0.5, 1, 2, 4, 8; M 10 and 20; K 50 and 100. In each cell Tang's sigma is
calibrated to the shape, and AdaDPSyn's constants come from the planner for the same shape
(sigma1 calibrated as the service does). Both run on the same ``--steps`` teacher sets;
``agree`` is P(noisy argmax = argmax of the clean mean of the M teachers).

Targets: pooled >= Tang - 1 SE (Tang's SE) in every cell, and pooled ahead of Tang by more
than 2 SE of the paired difference in at least a third of the cells. Cells that miss are
printed, and so are the cells where pooled is behind by more than 2 paired SE (a loss the
steps can tell from chance; the plain-SE test is near zero width where Tang's agreement is
0.999 or 1.000); exit status 1 if the first target fails.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.privacy.adadpsyn import pooled_aggregate_steps
from app.privacy.calibration import calibrate_noise
from app.privacy.params import AdaDPSynParams, TangParams
from app.privacy.planner import PlannerShape, plan_adadpsyn
from app.privacy.synthesis import SynthesisPrivacy
from app.privacy.tang import gaussian_aggregate

N, TMAX = 2, 30
# labels -> records per label; 4 shots spread over the labels, at most 2 per label.
SHAPES = {2: 300, 4: 250, 6: 150, 14: 357}
REGIMES = ("agreeing", "majority", "split", "diffuse", "close")


def shape(labels: int, M: int, K: int, epsilon: float) -> PlannerShape:
    sizes = {f"label{i}": SHAPES[labels] for i in range(labels)}
    shots = {f"label{i}": 2 if labels == 2 else 1 for i in range(min(labels, 4))}
    total = sum(sizes.values())
    return PlannerShape(
        M=M,
        K=K,
        N=N,
        tmax=TMAX,
        label_sizes=sizes,
        shots=shots,
        epsilon=epsilon,
        delta=1.0 / total,
    )


def teachers(regime: str, M: int, K: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``steps`` x M x K next-token distributions of one regime."""

    def around(base: np.ndarray, concentration: float) -> np.ndarray:
        draws = rng.gamma(concentration * base + 1e-3)
        return draws / draws.sum(axis=-1, keepdims=True)

    def peaked(*size: int) -> np.ndarray:
        return rng.dirichlet(np.full(K, 0.1), size=size)

    def one_hot(tokens: np.ndarray, mass: float) -> np.ndarray:
        out = np.full((*tokens.shape, K), (1.0 - mass) / (K - 1))
        np.put_along_axis(out, tokens[..., None], mass, axis=-1)
        return out

    if regime == "agreeing":
        return around(peaked(steps, 1).repeat(M, axis=1), 50.0)
    if regime == "majority":
        shared = one_hot(rng.integers(K, size=(steps, 1)), 0.8).repeat(M, axis=1)
        own = one_hot(rng.integers(K, size=(steps, M)), 0.8)
        base = np.where(rng.random((steps, M, 1)) < 0.65, shared, own)
        return around(base, 30.0)
    if regime == "split":
        which = rng.random((steps, M, 1)) < 0.6
        return around(np.where(which, peaked(steps, 1), peaked(steps, 1)), 50.0)
    if regime == "diffuse":
        return around(rng.dirichlet(np.ones(K), size=(steps, 1)).repeat(M, axis=1), float(K))
    if regime == "close":
        first, second = rng.integers(K, size=(steps, 2)).T
        base = one_hot(first[:, None], 0.4) + one_hot(second[:, None], 0.3)
        return around((base / base.sum(-1, keepdims=True)).repeat(M, axis=1), 60.0)
    raise ValueError(f"unknown regime {regime!r}")


@functools.cache
def methods(labels: int, M: int, K: int, epsilon: float) -> tuple[TangParams, AdaDPSynParams]:
    """Tang's and planned AdaDPSyn's parameters for the cell, each calibrated to epsilon."""
    job = shape(labels, M, K, epsilon)
    out = []
    for params in (TangParams(sigma=1.0), plan_adadpsyn(job).params()):
        privacy = SynthesisPrivacy(params=params, M=M, N=N, tmax=TMAX)
        result = calibrate_noise(
            privacy,
            label_sizes=job.label_sizes,
            shots=job.shots,
            target_epsilon=epsilon,
            delta=job.delta,
        )
        out.append(result.privacy.params)
    tang, pooled = out
    assert isinstance(tang, TangParams) and isinstance(pooled, AdaDPSynParams)
    return tang, pooled


def agreements(tang: TangParams, pooled: AdaDPSynParams, sets: np.ndarray, seed: int):
    """Per step: 1.0 where each method's noisy argmax equals the clean argmax."""
    clean = sets.mean(axis=1).argmax(-1)
    rng = np.random.default_rng(seed)
    ours = pooled_aggregate_steps(sets, pooled, rng).distributions.argmax(-1) == clean
    rng = np.random.default_rng(seed)  # the same noise stream: T = 0 reproduces Tang exactly
    theirs = np.array([gaussian_aggregate(p, tang, rng).token for p in sets]) == clean
    return theirs.astype(float), ours.astype(float)


@dataclass(frozen=True)
class Row:
    """One cell's outcome, for the summary tables."""

    regime: str
    M: int
    K: int
    epsilon: float
    checks: bool
    clip: bool
    ahead: bool  # by more than 2 paired SE
    behind: bool  # by more than 2 paired SE


def print_summary(rows: list[Row]) -> None:
    """Counts by (M, K, epsilon) and by regime: cells, what the planner planned, and the
    cells ahead or behind by more than 2 paired SE."""
    groupings: list[tuple[str, Callable[[Row], tuple[object, ...]]]] = [
        ("M | K | ε", lambda r: (r.M, r.K, f"{r.epsilon:g}")),
        ("regime", lambda r: (r.regime,)),
    ]
    for title, key in groupings:
        print(f"\n| {title} | cells | clip planned | checks planned | ahead | behind |")
        print("|---" * (title.count("|") + 6) + "|")
        for group in dict.fromkeys(key(r) for r in rows):
            members = [r for r in rows if key(r) == group]
            counts = [
                len(members),
                sum(r.clip for r in members),
                sum(r.checks for r in members),
                sum(r.ahead for r in members),
                sum(r.behind for r in members),
            ]
            print("| " + " | ".join(str(x) for x in (*group, *counts)) + " |")


def se(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / math.sqrt(values.size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="token steps per cell")
    parser.add_argument("--quick", action="store_true", help="M 10, K 50, eps 1 and 4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    Ks = (50,) if args.quick else (50, 100)
    Ms = (10,) if args.quick else (10, 20)
    epsilons = (1.0, 4.0) if args.quick else (0.5, 1.0, 2.0, 4.0, 8.0)

    start = time.perf_counter()
    behind, ahead, cells, losses = [], 0, 0, []
    rows: list[Row] = []
    print(
        "| labels | regime | K | M | ε | Tang agree | pooled agree | gain ± paired SE "
        "| T, checks | clip |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for regime in REGIMES:
        for K in Ks:
            for M in Ms:
                data_rng = np.random.default_rng([args.seed, K, M, REGIMES.index(regime), 7])
                sets = teachers(regime, M, K, args.steps, data_rng)
                for labels in SHAPES:
                    for epsilon in epsilons:
                        tang, pooled = methods(labels, M, K, epsilon)
                        a, b = agreements(tang, pooled, sets, args.seed + 1)
                        gain, gain_se = float((b - a).mean()), se(b - a)
                        cells += 1
                        cell = f"{labels} labels {regime} K={K} M={M} ε={epsilon:g}"
                        if b.mean() < a.mean() - se(a):
                            behind.append(cell)
                        if gain > 2 * gain_se:
                            ahead += 1
                        if gain < -2 * gain_se:
                            losses.append(cell)
                        checks = f"{pooled.sigma2:.1f}" if pooled.T else "-"
                        clip = f"{pooled.clip:g}" if pooled.clip is not None else "-"
                        print(
                            f"| {labels} | {regime} | {K} | {M} | {epsilon:g} "
                            f"| {a.mean():.3f} ± {se(a):.3f} | {b.mean():.3f} ± {se(b):.3f} "
                            f"| {gain:+.3f} ± {gain_se:.3f} | {pooled.T}, σ2 {checks} "
                            f"| {clip} |",
                            flush=True,
                        )
                        rows.append(
                            Row(
                                regime,
                                M,
                                K,
                                epsilon,
                                pooled.T > 0,
                                pooled.clip is not None,
                                gain > 2 * gain_se,
                                gain < -2 * gain_se,
                            )
                        )

    print_summary(rows)
    print(f"\n{cells} cells, {args.steps} steps each, {time.perf_counter() - start:.0f} s")
    print(f"pooled ahead of Tang by more than 2 paired SE in {ahead} of {cells} cells")
    if ahead * 3 < cells:
        print(f"MISS: strictly ahead in fewer than a third of the cells ({ahead}/{cells})")
    print(f"pooled behind Tang by more than 2 paired SE in {len(losses)} cells: {losses}")
    if behind:
        print("behind Tang by more than 1 SE in: " + "; ".join(behind))
        return 1
    print("PASS: pooled AdaDPSyn >= Tang - 1 SE in every cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
