"""GoodRadius (Nissim, Stemmer and Vadhan 2016) with a Gaussian DP binary search.

Given M points (next-token distributions), find privately a radius r such that some L2 ball
of radius r holds about t = ceil(tau * M) of them (AdaDPSyn, Algorithm 4 and 5).
"""

from __future__ import annotations

import numpy as np

from app.privacy.geometry import SIMPLEX_RADIUS
from app.privacy.mechanisms import GaussianMechanism
from app.privacy.params import binary_search_steps

L_SENSITIVITY = 2.0


def coverage_score(points: np.ndarray, radius: float, t: int) -> float:
    """L(r): the mean of the t largest capped ball counts min(B_r(x_i), t).

    B_r(x_i) counts the points within ``radius`` of point i (itself included). Sensitivity 2
    when one of the M points is replaced by another (the neighbouring relation of the token
    step, see :func:`app.privacy.tang.mean_mechanism`): every other point's capped count
    moves by at most 1, contributing at most t/t = 1 to the mean of t terms, and the replaced
    point's own capped count moves by at most t, contributing at most another 1.
    """
    return _covered(pairwise_distances(points), radius, t)


def pairwise_distances(points: np.ndarray) -> np.ndarray:
    """The M x M L2 distances between the points (they do not depend on the radius, so a
    search over radii computes them once)."""
    return np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)


def _covered(distances: np.ndarray, radius: float, t: int) -> float:
    """:func:`coverage_score` from the points' :func:`pairwise_distances`."""
    capped = np.minimum(np.count_nonzero(distances <= radius, axis=1), t)
    return float(np.sort(capped)[::-1][:t].sum() / t)


def comparison_mechanism(sigma0: float) -> GaussianMechanism:
    """One noisy evaluation of L: sensitivity 2, noise std 2 * sigma0."""
    return GaussianMechanism("good_radius.L", L_SENSITIVITY, sigma0)


def good_radius(
    points: np.ndarray,
    *,
    t: int,
    sigma0: float,
    theta: float,
    rng: np.random.Generator,
    released: list[GaussianMechanism] | None = None,
    slack: float = 0.0,
) -> float:
    """DP binary search on [0, sqrt(2)/2] for r with L(r) >= t and L(r/2) < t.

    Each of the :func:`~app.privacy.params.binary_search_steps` iterations compares noisy
    L(r_mid / 2) and noisy L(r_mid) with t; if either reaches t the upper end moves to r_mid,
    otherwise the lower end does. The interval halves every iteration whatever the data, so
    the number of noisy comparisons is fixed. Returns the midpoint of the final interval,
    always in [0, sqrt(2)/2]. Each release is appended to ``released`` when given.

    L is capped at t, so with ``slack = 0`` a radius whose true L is exactly t passes a noisy
    comparison only half the time. ``slack`` lowers the bar to t - slack * std (std the
    comparison noise, 2 * sigma0), as Nissim, Stemmer and Vadhan compare with a threshold
    below t; the bar is public, so the privacy of each comparison is unchanged.
    """
    mechanism = comparison_mechanism(sigma0)
    bar = t - slack * mechanism.std
    low, high = 0.0, SIMPLEX_RADIUS
    distances = pairwise_distances(points)  # L(r) for each r below: coverage_score's
    for _ in range(binary_search_steps(theta)):
        mid = (low + high) / 2
        half_ok = mechanism.release(_covered(distances, mid / 2, t), rng) >= bar
        full_ok = mechanism.release(_covered(distances, mid, t), rng) >= bar
        if released is not None:
            released.extend([mechanism, mechanism])
        if half_ok or full_ok:
            high = mid
        else:
            low = mid
    return (low + high) / 2
