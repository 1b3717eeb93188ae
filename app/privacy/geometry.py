"""Geometry of next-token distributions: L2 balls and the probability simplex.

Every point handled here is a probability vector over the same K public tokens. Two such
vectors are at most sqrt(2) apart in L2 (the distance between two distinct vertices), so the
unprojected mean of M of them moves by at most sqrt(2)/M when one is replaced: the
sensitivity of a projection onto a ball of radius sqrt(2)/2 (:data:`SIMPLEX_RADIUS`, half the
diameter). That is AdaDPSyn's initial radius *for sensitivity only*: the simplex does not fit
in a ball of that radius around an arbitrary centre (around a vertex, the opposite vertices
are sqrt(2) away; around the uniform point they are sqrt((K-1)/K) away, more than sqrt(2)/2
for K >= 3), so means at this radius are never projected (:func:`ball_holds_simplex`).

The uniform distribution is the one public centre with a better bound: teachers clipped to
radius r around it are at most sqrt(2 r^2 + 2/K) apart (:func:`clipped_diameter`), since no
two distributions point in opposite directions from it. Clipping keeps each teacher's
ranking of the tokens, so it costs signal only for teachers farther than r from uniform.
"""

from __future__ import annotations

import numpy as np

SIMPLEX_DIAMETER = float(np.sqrt(2.0))
SIMPLEX_RADIUS = SIMPLEX_DIAMETER / 2


def project_onto_ball(
    points: np.ndarray, centre: np.ndarray, radius: float | np.ndarray
) -> np.ndarray:
    """Project each row of ``points`` onto the closed L2 ball of ``radius`` around ``centre``.

    ``centre`` and ``radius`` broadcast against ``points`` (a stack of steps passes one centre
    S x 1 x K and one radius S x 1 x 1 per step; an infinite radius leaves a row unchanged).

    Rows already inside are returned unchanged; rows outside are moved along the ray from the
    centre to the boundary. After this, replacing one row changes the sum of rows by at most
    ``2 * radius`` in L2, which is the sensitivity the projected-mean mechanism relies on.
    """
    offsets = points - centre
    norms = np.linalg.norm(offsets, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(norms > radius, radius / norms, 1.0)
    return centre + offsets * scale


def as_distributions(rows: np.ndarray) -> np.ndarray:
    """Every row as an exact probability vector: the inputs every sensitivity here assumes.

    A backend renormalises in float32, so a row may sum to 1 +- 1e-7 or hold a -0.0; such
    rows are clipped at 0 and divided by their sum, so that no bound (sqrt(2) for two rows,
    :func:`clipped_diameter` after a clip) depends on a backend's rounding.

    A row that is no distribution at all (a non-finite entry, no positive mass: a model
    server that returned none of the requested tokens, a NaN from the forward pass) becomes
    the uniform distribution. Why not fail the job instead: whether it happens depends on
    the prompt, so on the private records sampled into it, and a job that fails (or not)
    without noise would tell the dataset's admins something no mechanism paid for. The
    replacement keeps the step's outcome a function of noisy aggregates only: each row is
    still a function of its own teacher's disjoint records, and it is a distribution (at the
    centre of every clip ball), so the sensitivity of every mean here is unchanged.
    """
    rows = np.asarray(rows, dtype=float)
    finite = np.all(np.isfinite(rows), axis=-1, keepdims=True)
    clipped = np.where(finite, np.maximum(rows, 0.0), 0.0)
    totals = clipped.sum(axis=-1, keepdims=True)
    valid = totals > 0.0
    uniform = np.full(rows.shape[-1:], 1.0 / rows.shape[-1])
    return np.where(valid, clipped / np.where(valid, totals, 1.0), uniform)


def clip_towards_uniform(points: np.ndarray, radius: float) -> np.ndarray:
    """Pull each distribution (row) that lies farther than ``radius`` from the uniform one
    back along the ray towards it, to distance ``radius``; nearer rows are unchanged.

    The result is a convex combination of the row and the uniform distribution, so it is
    still a distribution, and it ranks the tokens exactly as the row did (each coordinate
    moves towards 1/K by the same factor): a teacher's argmax never changes. The centre is
    public (it depends on K only), unlike a noisy centre's ball, which can pull every
    teacher towards a token none of them prefers.
    """
    K = points.shape[-1]
    return project_onto_ball(points, np.full(K, 1.0 / K), radius)


def clipped_diameter(radius: float, K: int) -> float:
    """The largest L2 distance between two distributions over K tokens that are each within
    ``radius`` of the uniform distribution u: min(sqrt(2), sqrt(2 radius^2 + 2/K)).

    Proof. For distributions a and b, ||a - b||^2 = ||a - u||^2 + ||b - u||^2 -
    2 <a - u, b - u>, and <a - u, b - u> = <a, b> - 1/K (since <a, u> = <b, u> = <u, u> =
    1/K), which is at least -1/K because a and b have no negative coordinates. So
    ||a - b||^2 <= 2 radius^2 + 2/K; and no two distributions are farther apart than two
    vertices, sqrt(2). This is the sensitivity (times M) of a mean of M teachers each passed
    through :func:`clip_towards_uniform`, under replacing one teacher. It is below the
    simplex's sqrt(2) once radius^2 < 1 - 1/K; radius = sqrt(1 - 1/K) clips nothing.
    """
    if radius <= 0 or K < 2:
        raise ValueError(f"need radius > 0 and K >= 2, got {radius}, {K}")
    return float(min(SIMPLEX_DIAMETER, np.sqrt(2.0 * radius**2 + 2.0 / K)))


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


def ball_holds_simplex(centre: np.ndarray, radius: float) -> bool:
    """Whether the closed L2 ball of ``radius`` around ``centre`` contains the whole simplex.

    A ball is convex, so it holds the simplex iff it holds every vertex e_i; the squared
    distance from ``centre`` to e_i is ||centre||^2 - 2 centre_i + 1.
    """
    centre = np.asarray(centre, dtype=float)
    farthest = float(np.max(np.sum(centre**2) - 2.0 * centre + 1.0))
    return farthest <= radius**2 + 1e-12


def count_within(points: np.ndarray, centre: np.ndarray, radius: float) -> int:
    """Number of rows of ``points`` within L2 distance ``radius`` of ``centre`` (inclusive)."""
    return int(np.count_nonzero(np.linalg.norm(points - centre, axis=-1) <= radius))


def counts_within(points: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """:func:`count_within` for a stack: ``points`` S x M x K, ``centres`` S x K, ``radii`` S."""
    distances = np.linalg.norm(points - centres[:, None, :], axis=-1)
    return np.count_nonzero(distances <= np.asarray(radii)[:, None], axis=-1)


def project_onto_simplex(vector: np.ndarray) -> np.ndarray:
    """The Euclidean projection of ``vector`` (or of each row of a stack) onto the simplex.

    The nearest distribution in L2: subtract the one threshold ``theta`` that makes the
    positive parts sum to 1, then clip at 0 (found by sorting, as in Held, Wolfe and Crowder
    1974). Because the simplex is convex, the projection is never farther than ``vector``
    from any distribution, the true mean included; clipping-and-renormalising
    (:func:`to_simplex`) has no such property and, under noise spread over K coordinates,
    shrinks the large coordinates. Subtracting one threshold keeps the order of the
    coordinates, so the argmax is unchanged. Works along the last axis; a row with a
    non-finite entry maps to the uniform distribution. Post-processing of a DP output.
    """
    vector = np.asarray(vector, dtype=float)
    K = vector.shape[-1]
    finite = np.all(np.isfinite(vector), axis=-1, keepdims=True)
    safe = np.where(finite, vector, 0.0)
    ordered = -np.sort(-safe, axis=-1)
    excess = np.cumsum(ordered, axis=-1) - 1.0
    ranks = np.arange(1, K + 1)
    inside = ordered - excess / ranks > 0  # true on a prefix of the sorted coordinates
    support = K - 1 - np.argmax(inside[..., ::-1], axis=-1)  # the last true index
    theta = np.take_along_axis(excess, support[..., None], axis=-1) / (support[..., None] + 1)
    return np.where(finite, np.maximum(safe - theta, 0.0), 1.0 / K)
