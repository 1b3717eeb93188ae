"""AdaDPSyn aggregation: Precision-Focused Iterative Radius Reduction (Algorithm 1, 5-23).

Start from a noisy mean with the radius of the whole simplex, then, while a noisy check says
enough of the M distributions sit near the current estimate, shrink the radius towards the
private GoodRadius target, clip every distribution into that smaller ball, and take a new
noisy mean whose noise scales with the smaller radius. When the M teachers agree, the noise
shrinks with them.
"""

from __future__ import annotations

import math

import numpy as np

from app.privacy.geometry import SIMPLEX_RADIUS, count_within, project_onto_ball, to_simplex
from app.privacy.good_radius import good_radius
from app.privacy.mechanisms import GaussianMechanism
from app.privacy.params import AdaDPSynParams
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
    M, K = probs.shape
    released: list[GaussianMechanism] = []

    target = good_radius(
        probs,
        t=params.coverage_target(M),
        sigma0=params.sigma0,
        theta=params.theta,
        rng=rng,
        released=released,
    )

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

    diagnostics: dict[str, object] = {
        "good_radius": target,
        "radii": radii,
        "rounds": rounds,
        "stopped_by": stopped_by,
    }
    return AggregationResult(centre, int(np.argmax(centre)), released, diagnostics)
