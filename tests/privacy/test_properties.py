"""Property tests of the geometry and the aggregation mechanisms (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from app.privacy.adadpsyn import adadpsyn_aggregate
from app.privacy.geometry import SIMPLEX_RADIUS, project_onto_ball, to_simplex
from app.privacy.good_radius import good_radius
from app.privacy.params import AdaDPSynParams, TangParams
from app.privacy.rng import make_rng
from app.privacy.tang import gaussian_aggregate

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)


@st.composite
def distributions(draw, m_min: int = 1, m_max: int = 12, k_min: int = 2, k_max: int = 8):
    """An M x K array whose rows are probability vectors (including sparse ones)."""
    M = draw(st.integers(m_min, m_max))
    K = draw(st.integers(k_min, k_max))
    raw = draw(arrays(float, (M, K), elements=st.floats(0, 1, allow_nan=False)))
    raw[np.arange(M), draw(st.integers(0, K - 1))] += 1e-3  # no all-zero row
    return raw / raw.sum(axis=1, keepdims=True)


@given(
    points=arrays(float, (6, 4), elements=finite),
    centre=arrays(float, (4,), elements=finite),
    radius=st.floats(0, 5, allow_nan=False),
)
def test_projection_never_leaves_the_ball(points, centre, radius):
    projected = project_onto_ball(points, centre, radius)
    assert np.all(np.linalg.norm(projected - centre, axis=1) <= radius * (1 + 1e-9) + 1e-12)
    inside = np.linalg.norm(points - centre, axis=1) <= radius
    assert np.allclose(projected[inside], points[inside])


@given(arrays(float, (7,), elements=finite))
def test_simplex_mapping_gives_a_distribution(vector):
    mapped = to_simplex(vector)
    assert np.all(mapped >= 0)
    assert np.isclose(mapped.sum(), 1.0)
    if np.any(vector > 0):  # positive coordinates keep their ratios
        positive = vector > 0
        assert np.allclose(mapped[positive] * vector[positive].sum(), vector[positive])


@given(
    probs=distributions(m_min=2),
    replacement_seed=st.integers(0, 2**32 - 1),
    radius=st.floats(0.0, SIMPLEX_RADIUS),
)
def test_replacing_one_vector_moves_projected_sum_by_at_most_2r(probs, replacement_seed, radius):
    rng = np.random.default_rng(replacement_seed)
    M, K = probs.shape
    centre = rng.dirichlet(np.ones(K))
    neighbour = probs.copy()
    neighbour[rng.integers(M)] = rng.dirichlet(np.full(K, 0.2))
    before = project_onto_ball(probs, centre, radius).sum(axis=0)
    after = project_onto_ball(neighbour, centre, radius).sum(axis=0)
    assert np.linalg.norm(before - after) <= 2 * radius + 1e-12


@settings(max_examples=50, deadline=None)
@given(probs=distributions(), sigma0=st.floats(0, 50), seed=st.integers(0, 2**32 - 1))
def test_good_radius_stays_in_range(probs, sigma0, seed):
    t = int(np.ceil(0.8 * len(probs)))
    r = good_radius(probs, t=t, sigma0=sigma0, theta=0.1, rng=make_rng(seed))
    assert 0.0 <= r <= SIMPLEX_RADIUS


def test_good_radius_without_noise_finds_the_cluster_radius():
    """With sigma0 = 0, GoodRadius brackets the radius that holds 80% of a tight cluster."""
    rng = np.random.default_rng(0)
    centre = np.array([0.7, 0.1, 0.1, 0.1])
    points = np.clip(centre + rng.normal(0, 0.01, (20, 4)), 0, None)
    points /= points.sum(axis=1, keepdims=True)
    r = good_radius(points, t=16, sigma0=0.0, theta=0.1, rng=make_rng(1))
    assert r < 0.1  # the whole cluster has diameter well under 0.1


@settings(max_examples=40, deadline=None)
@given(
    row=distributions(m_min=1, m_max=1),
    M=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_identical_inputs_negligible_noise_return_the_input(row, M, seed):
    probs = np.repeat(row, M, axis=0)
    tang = gaussian_aggregate(probs, TangParams(sigma=1e-12), make_rng(seed))
    assert np.allclose(tang.distribution, row[0], atol=1e-9)
    params = AdaDPSynParams(sigma0=1e-12, sigma1=1e-12, sigma2=1e-12, T=2)
    ada = adadpsyn_aggregate(probs, params, make_rng(seed))
    assert np.allclose(ada.distribution, row[0], atol=1e-9)
    assert ada.token == int(np.argmax(ada.distribution))
