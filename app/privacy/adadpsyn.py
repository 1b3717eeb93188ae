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

import numpy as np

from app.privacy.geometry import (
    SIMPLEX_RADIUS,
    count_within,
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


class _Pool:
    """Inverse-variance combination of unbiasedly-noised means released so far.

    Release j has per-coordinate noise variance proportional to its radius R_j squared
    (std 2 * R_j * sigma1 / M), so weights 1 / R_j^2 minimise the combined variance. The
    combination is post-processing of DP releases; its noise std is public.
    """

    def __init__(self) -> None:
        # A 0-d zero broadcasts to the first release's shape on the first add.
        self.weighted: np.ndarray = np.zeros(())
        self.weight = 0.0

    def add(self, release: np.ndarray, radius: float) -> None:
        self.weighted = self.weighted + release / radius**2
        self.weight += 1.0 / radius**2

    @property
    def estimate(self) -> np.ndarray:
        return self.weighted / self.weight

    def std(self, sigma1: float, M: int) -> float:
        """Per-coordinate noise std of :attr:`estimate`."""
        return 2.0 * sigma1 / (M * math.sqrt(self.weight))


def _aggregate_pooled(
    probs: np.ndarray, params: AdaDPSynParams, rng: np.random.Generator
) -> AggregationResult:
    """Spend every charged mean and combine them (the default variant).

    Runs the same mechanisms as the paper, each with the sensitivity stated on its maker,
    and never more of them than :meth:`AdaDPSynParams.round_events` charges: at most
    ``2 * binary_search_steps`` GoodRadius comparisons (none when GoodRadius is off), at most
    T coverage checks, and exactly T + 1 projected means. What differs is post-processing
    and which public quantities pick the next radius and centre:

    * the centre of each check and projection is the Euclidean projection onto the simplex
      of the inverse-variance combination of all means so far (a function of DP outputs);
    * a check passes only at a noisy count of at least ``mu * M + coverage_margin * sigma2``,
      so that a ball holding fewer than ``mu * M`` teachers rarely passes;
    * the candidate radius is GoodRadius's target plus ``lam`` times the centre's expected
      noise norm, or ``shrink`` times the current radius when GoodRadius does not run;
    * when the loop stops early, the means it did not run run at the final radius, and the
      output is the combination of all T + 1.
    """
    M, K = probs.shape
    released: list[GaussianMechanism] = []
    target: float | None = None
    if params.good_radius:
        target = _good_radius_target(probs, params, rng, released, slack=params.slack)

    pool = _Pool()
    radii: list[float] = []

    def release_mean(radius: float, centre: np.ndarray | None) -> np.ndarray:
        """One charged projected mean around ``centre`` (none at the full radius, which
        holds the whole simplex), pooled; returns the new centre."""
        points = probs if centre is None else project_onto_ball(probs, centre, radius)
        mean = projected_mean_mechanism(M, radius, params.sigma1)
        pool.add(mean.release(points.mean(axis=0), rng), radius)
        released.append(mean)
        radii.append(radius)
        return project_onto_simplex(pool.estimate)

    radius = SIMPLEX_RADIUS
    centre = release_mean(radius, None)
    coverage = coverage_mechanism(params.sigma2)
    threshold = params.mu * M + params.coverage_margin * params.sigma2
    stopped_by = "rounds"
    rounds = 0

    for _ in range(params.T):
        if target is None:
            candidate = params.shrink * radius
        else:
            candidate = target + params.lam * pool.std(params.sigma1, M) * math.sqrt(K)
        if candidate >= radius:
            stopped_by = "radius"
            break
        noisy_count = coverage.release(count_within(probs, centre, candidate), rng)
        released.append(coverage)
        if noisy_count < threshold:
            stopped_by = "coverage"
            break
        radius = candidate
        centre = release_mean(radius, centre)
        rounds += 1

    while len(radii) < params.T + 1:  # charged means the loop did not run
        centre = release_mean(radius, centre)

    return _result(centre, released, target, radii, rounds, stopped_by)
