"""Geometry of next-token distributions: L2 balls and the probability simplex.

Every point handled here is a probability vector over the same K public tokens. Two such
vectors are at most sqrt(2) apart in L2 (the distance between two distinct vertices), so the
simplex fits in an L2 ball of radius sqrt(2)/2 around any of its points' midpoints; that is
the initial radius of AdaDPSyn.
"""

from __future__ import annotations

import numpy as np

SIMPLEX_DIAMETER = float(np.sqrt(2.0))
SIMPLEX_RADIUS = SIMPLEX_DIAMETER / 2


def project_onto_ball(points: np.ndarray, centre: np.ndarray, radius: float) -> np.ndarray:
    """Project each row of ``points`` onto the closed L2 ball of ``radius`` around ``centre``.

    Rows already inside are returned unchanged; rows outside are moved along the ray from the
    centre to the boundary. After this, replacing one row changes the sum of rows by at most
    ``2 * radius`` in L2, which is the sensitivity the projected-mean mechanism relies on.
    """
    offsets = points - centre
    norms = np.linalg.norm(offsets, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(norms > radius, radius / norms, 1.0)
    return centre + offsets * scale


def to_simplex(vector: np.ndarray) -> np.ndarray:
    """Map a noisy vector back to a distribution: clip negatives to 0, then renormalise.

    If every coordinate is non-positive (possible only under very large noise) there is no
    information left to keep, and the uniform distribution is returned. This is
    post-processing of a DP output, so any deterministic choice is safe.
    """
    clipped = np.maximum(vector, 0.0)
    total = clipped.sum()
    if not np.isfinite(total) or total <= 0.0:
        return np.full_like(vector, 1.0 / vector.shape[-1], dtype=float)
    return clipped / total


def count_within(points: np.ndarray, centre: np.ndarray, radius: float) -> int:
    """Number of rows of ``points`` within L2 distance ``radius`` of ``centre`` (inclusive)."""
    return int(np.count_nonzero(np.linalg.norm(points - centre, axis=-1) <= radius))


def project_onto_simplex(vector: np.ndarray) -> np.ndarray:
    """The Euclidean projection of ``vector`` onto the probability simplex.

    The nearest distribution in L2: subtract the one threshold ``theta`` that makes the
    positive parts sum to 1, then clip at 0 (found by sorting, as in Held, Wolfe and Crowder
    1974). Because the simplex is convex, the projection is never farther than ``vector``
    from any distribution, the true mean included; clipping-and-renormalising
    (:func:`to_simplex`) has no such property and, under noise spread over K coordinates,
    shrinks the large coordinates. Subtracting one threshold keeps the order of the
    coordinates, so the argmax is unchanged. Post-processing of a DP output.
    """
    vector = np.asarray(vector, dtype=float)
    if not np.all(np.isfinite(vector)):
        return np.full(vector.shape[-1], 1.0 / vector.shape[-1])
    ordered = np.sort(vector)[::-1]
    excess = np.cumsum(ordered) - 1.0
    ranks = np.arange(1, vector.shape[-1] + 1)
    support = np.nonzero(ordered - excess / ranks > 0)[0][-1]
    theta = excess[support] / (support + 1)
    return np.maximum(vector - theta, 0.0)
