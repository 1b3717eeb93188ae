"""AdaDPSyn aggregation: Precision-Focused Iterative Radius Reduction (Algorithm 1, 5-23).

Start from a noisy mean with the radius of the whole simplex, then, while a noisy check says
enough of the M distributions sit near the current estimate, shrink the radius towards the
private GoodRadius target, clip every distribution into that smaller ball, and take a new
noisy mean whose noise scales with the smaller radius. When the M teachers agree, the noise
shrinks with them.

Two variants (:class:`~app.privacy.params.AdaDPSynVariant`) share these mechanisms and are
charged alike: ``paper`` as published, and ``pooled``, which spends every projected mean the
accountant charges and combines them (docs/privacy.md, "AdaDPSyn variants").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.privacy import releases
from app.privacy.events import GaussianEvent, Sensitivity
from app.privacy.geometry import (
    SIMPLEX_RADIUS,
    clip_towards_uniform,
    clipped_diameter,
    count_within,
    counts_within,
    project_onto_ball,
    project_onto_simplex,
    to_simplex,
)
from app.privacy.good_radius import good_radius
from app.privacy.mechanisms import GaussianMechanism
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant
from app.privacy.tang import AggregationResult


def projected_mean_mechanism(M: int, radius: float, sigma1: float) -> GaussianMechanism:
    """Noisy mean of M points each projected into a ball of ``radius`` around a public centre.

    Sensitivity 2R/M: the centre is a previous DP output, so it is the same for neighbouring
    inputs; replacing one of the M points (one teacher's distribution, see
    :func:`app.privacy.tang.mean_mechanism`) moves its projection within the ball, at most
    the diameter 2R; the fixed divisor M gives 2R/M. Noise std 2 * R * sigma1 / M.
    """
    return GaussianMechanism("adadpsyn.projected_mean", 2.0 * radius / M, sigma1)


def clipped_mean_mechanism(M: int, K: int, clip: float, sigma1: float) -> GaussianMechanism:
    """Noisy mean of M distributions over K tokens, each first clipped to L2 distance
    ``clip`` from the uniform distribution (:func:`~app.privacy.geometry.clip_towards_uniform`).

    Sensitivity D/M with D = :func:`~app.privacy.geometry.clipped_diameter` (clip, K) =
    min(sqrt(2), sqrt(2 clip^2 + 2/K)), under replacing one of the M teachers (one disjoint
    subset of the step's private records, as for :func:`app.privacy.tang.mean_mechanism`):
    the clipped teachers are distributions within ``clip`` of the public uniform point, any
    two such are at most D apart (the proof is on ``clipped_diameter``), and the divisor M is
    fixed. Noise std D * sigma1 / M, so the multiplier (and the price) is sigma1's, as for a
    projected mean; it is the projected mean's formula with radius D / 2.
    """
    return GaussianMechanism("adadpsyn.clipped_mean", clipped_diameter(clip, K) / M, sigma1)


def coverage_mechanism(sigma2: float) -> GaussianMechanism:
    """Noisy count of points within a ball: replacing one point changes it by at most 1."""
    return GaussianMechanism("adadpsyn.coverage", 1.0, sigma2)


def adadpsyn_aggregate(
    probs: np.ndarray, params: AdaDPSynParams, rng: np.random.Generator
) -> AggregationResult:
    """Aggregate an M x K array of next-token distributions; return the noisy distribution.

    ``diagnostics`` holds only DP outputs: the GoodRadius target, the radii used, the number
    of reduction rounds that ran and why the loop stopped.
    """
    probs = np.asarray(probs, dtype=float)
    if probs.ndim != 2:
        raise ValueError(f"expected an M x K array, got shape {probs.shape}")
    if params.variant is AdaDPSynVariant.PAPER:
        return _aggregate_paper(probs, params, rng)
    return _aggregate_pooled(probs, params, rng)


def _aggregate_paper(
    probs: np.ndarray, params: AdaDPSynParams, rng: np.random.Generator
) -> AggregationResult:
    """Algorithm 1, lines 5-23, as published: the last projected mean is the output."""
    M, K = probs.shape
    released: list[GaussianMechanism] = []

    target = _good_radius_target(probs, params, rng, released, slack=0.0)

    radius = SIMPLEX_RADIUS
    mean = projected_mean_mechanism(M, radius, params.sigma1)
    centre = to_simplex(mean.release(probs.mean(axis=0), rng))
    released.append(mean)
    coverage = coverage_mechanism(params.sigma2)
    radii = [radius]
    stopped_by = "rounds"
    rounds = 0

    for _ in range(params.T):
        bound = target + 2 * params.lam * radius * params.sigma1 * math.sqrt(K) / M
        noisy_count = coverage.release(count_within(probs, centre, bound), rng)
        released.append(coverage)
        if noisy_count < params.mu * M:
            stopped_by = "coverage"
            break
        if radius < bound:
            stopped_by = "radius"
            break
        radius = bound
        projected = project_onto_ball(probs, centre, radius)
        mean = projected_mean_mechanism(M, radius, params.sigma1)
        centre = to_simplex(mean.release(projected.mean(axis=0), rng))
        released.append(mean)
        radii.append(radius)
        rounds += 1

    return _result(centre, released, target, radii, rounds, stopped_by)


def _result(
    centre: np.ndarray,
    released: list[GaussianMechanism],
    target: float | None,
    radii: list[float],
    rounds: int,
    stopped_by: str,
) -> AggregationResult:
    """The output distribution, its argmax, what ran, and diagnostics made of DP outputs only."""
    diagnostics: dict[str, object] = {
        "good_radius": target,
        "radii": radii,
        "rounds": rounds,
        "stopped_by": stopped_by,
    }
    return AggregationResult(centre, int(np.argmax(centre)), released, diagnostics)


def _good_radius_target(
    probs: np.ndarray,
    params: AdaDPSynParams,
    rng: np.random.Generator,
    released: list[GaussianMechanism],
    *,
    slack: float,
) -> float:
    """GoodRadius's private radius for ceil(tau * M) of the M distributions."""
    return good_radius(
        probs,
        t=params.coverage_target(probs.shape[0]),
        sigma0=params.sigma0,
        theta=params.theta,
        rng=rng,
        released=released,
        slack=slack,
    )


@dataclass
class PooledSteps:
    """What the pooled aggregator did for a stack of S token steps (DP outputs only).

    ``radii[s, j]`` is the sensitivity radius of step s's mean j (sqrt(2)/2 when the mean was
    not projected, half the clipped diameter when its teachers were clipped towards uniform);
    ``checks[s, r]`` is 1 (passed), 0 (failed) or -1 (not run) for round r; ``targets[s]`` is
    GoodRadius's target (None when it does not run).
    """

    distributions: np.ndarray
    radii: np.ndarray
    checks: np.ndarray
    rounds: np.ndarray
    stopped_by: list[str]
    targets: list[float | None]


def pooled_aggregate_steps(
    probs: np.ndarray,
    params: AdaDPSynParams,
    rng: np.random.Generator,
    released: list[GaussianMechanism] | None = None,
) -> PooledSteps:
    """The pooled variant on S independent token steps at once (``probs`` S x M x K).

    Each step runs exactly what :func:`_aggregate_pooled` documents; the steps share only
    the vectorised arithmetic (the planner simulates thousands of steps through this same
    code). Noise is drawn per step: the draws of a stack of one are those of one step, in the
    order the mechanisms run. ``released`` (for a stack of one) receives each mechanism.
    """
    S, M, K = probs.shape
    targets: list[float | None] = [None] * S
    sink = released if released is not None else []
    if params.good_radius:
        targets = [
            _good_radius_target(step, params, rng, sink, slack=params.slack) for step in probs
        ]
    target = np.array([np.nan if t is None else t for t in targets])
    rows = np.arange(S)
    means, start = _unprojected_means(probs, params)
    T = params.T
    radii = np.full((S, T + 1), start)
    checks = np.full((S, T), -1, dtype=np.int8)
    stopped = np.full(S, "rounds", dtype=object)
    active = np.ones(S, dtype=bool)
    ball_centre = np.zeros((S, K))
    ball_radius = np.full(S, np.inf)  # inf: no check passed yet, means are not projected
    weighted, weight = np.zeros((S, K)), np.zeros(S)

    def release_means(j: int) -> np.ndarray:
        """Mean j of every step: projected onto its last passed check's ball, if any."""
        nonlocal weighted, weight
        has_ball = np.isfinite(ball_radius)
        values = means
        if has_ball.any():  # (no check passed in any step: nothing to project)
            ball = (ball_centre[:, None, :], ball_radius[:, None, None])
            projected = project_onto_ball(probs, *ball).mean(axis=1)
            values = np.where(has_ball[:, None], projected, means)
        radius = np.where(has_ball, ball_radius, start)
        std = 2.0 * radius * params.sigma1 / M  # projected_mean_mechanism's, per step
        _note_means(lambda: _mean_mechanisms(has_ball, radius, M, K, params), std, released)
        noisy = values + rng.normal(0.0, std[:, None], size=(S, K))
        radii[:, j] = radius
        weighted = weighted + noisy / radius[:, None] ** 2
        weight = weight + 1.0 / radius**2
        return project_onto_simplex(weighted / weight[:, None])

    centre = release_means(0)
    current = np.full(S, start)
    coverage = coverage_mechanism(params.sigma2)
    threshold = params.mu * M + params.coverage_margin * params.sigma2
    for r in range(T):
        pool_std = 2.0 * params.sigma1 / (M * np.sqrt(weight))
        candidate = np.where(
            np.isnan(target), params.shrink * current, target + params.lam * pool_std * math.sqrt(K)
        )
        too_big = active & (candidate >= current)
        stopped[too_big] = "radius"
        active &= ~too_big
        live = rows[active]
        if live.size:
            within = counts_within(probs[live], centre[live], candidate[live])
            noisy = coverage.release(within, rng, rows=live.size)
            if released is not None:
                released.extend(coverage for _ in live)
            passed = noisy >= threshold
            checks[live, r] = passed
            stopped[live[~passed]] = "coverage"
            active[live[~passed]] = False
            won = live[passed]
            ball_centre[won], ball_radius[won] = centre[won], candidate[won]
            current[won] = candidate[won]
        centre = release_means(r + 1)

    rounds = np.count_nonzero(checks == 1, axis=1)
    return PooledSteps(centre, radii, checks, rounds, list(stopped), targets)


def _note_means(
    mechanisms_of: Callable[[], list[GaussianMechanism]],
    std: np.ndarray,
    released: list[GaussianMechanism] | None,
) -> None:
    """Record each step's mean as drawn (:mod:`app.privacy.releases`): noise ``std`` (the
    projected mean's formula, per step) on a query of its mechanism's sensitivity, so the
    record shows any gap between the two; and hand the mechanisms to ``released``. Only
    when someone listens: the planner runs thousands of steps through here."""
    if released is None and not releases.recording_now():
        return
    mechanisms = mechanisms_of()
    for mechanism, drawn in zip(mechanisms, std, strict=True):
        both = Sensitivity(mechanism.sensitivity, mechanism.sensitivity)
        releases.record(GaussianEvent(float(drawn), sensitivity=both))
    if released is not None:
        released.extend(mechanisms)


def _mean_mechanisms(
    has_ball: np.ndarray, radius: np.ndarray, M: int, K: int, params: AdaDPSynParams
) -> list[GaussianMechanism]:
    """The mechanism each step's mean ran: projected onto a passed check's ball, clipped
    towards uniform, or unprojected (the projected mean's formula at sqrt(2)/2)."""
    return [
        projected_mean_mechanism(M, float(r), params.sigma1)
        if ball or params.clip is None
        else clipped_mean_mechanism(M, K, params.clip, params.sigma1)
        for ball, r in zip(has_ball, radius, strict=True)
    ]


def _unprojected_means(probs: np.ndarray, params: AdaDPSynParams) -> tuple[np.ndarray, float]:
    """Each step's mean before any check passes, and its sensitivity radius (half the L2
    diameter of what one teacher can contribute): the plain mean at sqrt(2)/2, or the mean
    of teachers clipped towards the uniform distribution at ``clipped_diameter / 2``."""
    if params.clip is None:
        return probs.mean(axis=1), SIMPLEX_RADIUS
    K = probs.shape[-1]
    clipped = clip_towards_uniform(probs, params.clip)
    return clipped.mean(axis=1), clipped_diameter(params.clip, K) / 2


def _aggregate_pooled(
    probs: np.ndarray, params: AdaDPSynParams, rng: np.random.Generator
) -> AggregationResult:
    """Spend every charged mean and combine them (the default variant).

    Runs the same mechanisms as the paper, each with the sensitivity stated on its maker,
    and never more of them than :meth:`AdaDPSynParams.round_events` charges: at most
    ``2 * binary_search_steps`` GoodRadius comparisons (none when GoodRadius is off), at most
    T coverage checks, and exactly T + 1 projected means. What differs is post-processing
    and which public quantities pick the next radius and centre:

    * the centre of each check is the Euclidean projection onto the simplex of the
      inverse-variance combination of all means so far (weights 1/R_j^2: mean j's noise std
      is 2 R_j sigma1 / M), a function of DP outputs;
    * a check passes only at a noisy count of at least ``mu * M + coverage_margin * sigma2``,
      so that a ball holding fewer than ``mu * M`` teachers rarely passes;
    * the candidate radius is GoodRadius's target plus ``lam`` times the centre's expected
      noise norm, or ``shrink`` times the current radius when GoodRadius does not run;
    * a mean is projected only onto the ball (centre and radius) of a check that passed;
      before any check passes, means are not projected at all. A ball of radius sqrt(2)/2
      around an arbitrary centre does not hold the simplex (two vertices are sqrt(2) apart),
      so projecting onto it would pull teachers towards a centre that is mostly noise;
    * with ``clip`` set, those unprojected means instead average the teachers clipped
      towards the *uniform* distribution, a public centre: clipping keeps each teacher's
      ranking of the tokens, and their sensitivity is sqrt(2 clip^2 + 2/K)/M, below
      sqrt(2)/M (:func:`clipped_mean_mechanism`), at the same multiplier and price;
    * when the loop stops early, the means it did not run run on the last passed check's
      ball (unprojected if none passed), and the output is the combination of all T + 1.

    With T = 0 and no clip this is one unprojected mean at multiplier sigma1: Tang et al.'s
    mechanism.
    """
    released: list[GaussianMechanism] = []
    steps = pooled_aggregate_steps(probs[None], params, rng, released)
    result = _result(
        steps.distributions[0],
        released,
        steps.targets[0],
        [float(r) for r in steps.radii[0]],
        int(steps.rounds[0]),
        steps.stopped_by[0],
    )
    result.diagnostics["checks"] = [bool(c) for c in steps.checks[0] if c >= 0]
    return result
