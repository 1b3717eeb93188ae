"""Clipping teachers towards the uniform distribution (issue 19): the bound on how far apart
two clipped teachers can be (the clipped mean's sensitivity), the ranking it keeps, and the
noise the pooled aggregator adds for it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.privacy.adadpsyn import adadpsyn_aggregate, clipped_mean_mechanism
from app.privacy.geometry import (
    SIMPLEX_DIAMETER,
    as_distributions,
    clip_towards_uniform,
    clipped_diameter,
    project_onto_simplex,
)
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant
from app.privacy.rng import make_rng
from tests.privacy.test_noise import RecordingGenerator, assert_std
from tests.privacy.test_pooled import failing_checks

POOLED = AdaDPSynVariant.POOLED


def _teachers(rng: np.random.Generator, M: int, K: int, concentration: float) -> np.ndarray:
    """Dirichlet teachers, with vertices and two-token distributions mixed in (the points
    farthest from uniform and from each other)."""
    probs = rng.dirichlet(np.full(K, concentration), size=M)
    probs[0] = np.eye(K)[0]
    probs[1] = np.eye(K)[K - 1]
    probs[2] = 0.0
    probs[2, [0, K // 2]] = 0.5
    return probs


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    K=st.integers(2, 200),
    radius=st.floats(0.01, 1.0),
    concentration=st.floats(0.005, 5.0),
)
def test_no_two_clipped_teachers_are_farther_apart_than_the_stated_diameter(
    seed, K, radius, concentration
):
    """Every pair of 12 clipped teachers (vertices, two-token and sparse Dirichlet rows
    included) is within clipped_diameter(radius, K): the clipped mean's sensitivity times M."""
    clipped = clip_towards_uniform(_teachers(make_rng(seed), 12, K, concentration), radius)
    gaps = np.linalg.norm(clipped[:, None, :] - clipped[None, :, :], axis=-1)
    assert gaps.max() <= clipped_diameter(radius, K) + 1e-12


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    K=st.integers(2, 100),
    radius=st.floats(0.01, 1.0),
    concentration=st.floats(0.01, 5.0),
)
def test_clipped_teachers_are_distributions_that_rank_the_tokens_as_before(
    seed, K, radius, concentration
):
    probs = _teachers(make_rng(seed), 8, K, concentration)
    clipped = clip_towards_uniform(probs, radius)
    assert np.all(clipped >= -1e-15)
    np.testing.assert_allclose(clipped.sum(-1), 1.0, atol=1e-12)
    uniform = np.full(K, 1.0 / K)
    assert np.all(np.linalg.norm(clipped - uniform, axis=-1) <= radius + 1e-12)
    for before, after in zip(probs, clipped, strict=True):
        order = np.argsort(before, kind="stable")
        assert np.all(np.diff(after[order]) >= -1e-15)  # no pair of tokens swaps
        assert after.argmax() == before.argmax()


def test_the_diameter_is_nearly_reached_and_clips_nothing_at_the_simplex_radius():
    """Two vertices clipped to the radius are sqrt(2 K / (K - 1)) * radius apart, within a few
    per cent of the bound for a large K; at radius sqrt(1 - 1/K) nothing is clipped and the
    bound is the simplex's own diameter, sqrt(2) (Tang's sensitivity)."""
    K, radius = 100, 0.4
    ends = clip_towards_uniform(np.eye(K)[:2], radius)
    reached = float(np.linalg.norm(ends[0] - ends[1]))
    assert reached == pytest.approx(radius * math.sqrt(2 * K / (K - 1)))
    assert reached / clipped_diameter(radius, K) > 0.93
    full = math.sqrt(1 - 1 / K)
    np.testing.assert_allclose(clip_towards_uniform(np.eye(K), full), np.eye(K), atol=1e-12)
    assert clipped_diameter(full, K) == pytest.approx(SIMPLEX_DIAMETER)
    assert clipped_diameter(1.0, K) == SIMPLEX_DIAMETER
    with pytest.raises(ValueError, match="radius > 0"):
        clipped_diameter(0.0, K)


@pytest.mark.parametrize("T", [0, 2])
def test_the_unprojected_means_are_clipped_means_released_at_their_sensitivity(T):
    """Every check fails (mu = 1, a margin no count reaches): all T + 1 means are clipped
    means, each recorded as the clipped-mean mechanism, and the pooled estimate's noise has
    std D sigma1 / (M sqrt(T + 1)), D = clipped_diameter(clip, K): below Tang's sqrt(2)."""
    M, K, sigma1, clip = 10, 20, 0.7, 0.3
    params = failing_checks(T, sigma1, clip=clip)
    rng = make_rng(3)
    probs = rng.dirichlet(np.full(K, 0.2), size=M)
    clipped_mean = clip_towards_uniform(probs, clip).mean(axis=0)
    diameter = clipped_diameter(clip, K)
    assert diameter < SIMPLEX_DIAMETER / 2
    noise = []
    for _ in range(2000):
        recorder = RecordingGenerator(int(rng.integers(2**31)))
        result = adadpsyn_aggregate(probs, params, recorder)
        means = [m for m in result.released if m.name != "adadpsyn.coverage"]
        assert means == [clipped_mean_mechanism(M, K, clip, sigma1)] * (T + 1)
        assert means[0].sensitivity == pytest.approx(diameter / M)
        draws = [d[0] for d in recorder.draws if d.ndim == 2]
        noise.append(np.mean(draws, axis=0))  # equal radii: equal weights
        assert result.diagnostics["radii"] == pytest.approx([diameter / 2] * (T + 1))
        # the output is the simplex projection of the clipped mean plus that noise
        expected = project_onto_simplex(clipped_mean + noise[-1])
        np.testing.assert_allclose(result.distribution, expected, atol=1e-12)
    assert_std(np.concatenate(noise), diameter * sigma1 / (M * math.sqrt(T + 1)))


def test_clip_is_a_pooled_parameter_with_a_positive_radius():
    with pytest.raises(ValidationError, match="pooled variant only"):
        AdaDPSynParams(variant=AdaDPSynVariant.PAPER, sigma1=1.0, clip=0.4)
    for bad in (0.0, -0.1, 1.5, math.nan):
        with pytest.raises(ValidationError, match="clip"):
            AdaDPSynParams(variant=POOLED, sigma1=1.0, clip=bad)
    assert AdaDPSynParams(variant=POOLED, sigma1=1.0, clip=0.4).round_events() == (
        AdaDPSynParams(variant=POOLED, sigma1=1.0).round_events()
    )  # the same mechanisms at the same multipliers: the same price


def test_backend_rows_become_exact_distributions_or_the_uniform_one():
    """The bounds assume distributions: float32 rounding is repaired, and a row that is not a
    distribution at all (NaN, infinite, no positive mass) becomes the uniform distribution,
    leaving the other rows as they were."""
    rows = np.array([[0.5, 0.5 + 1e-7, -0.0, -1e-9], [2.0, 1.0, 1.0, 0.0]])
    fixed = as_distributions(rows)
    assert np.all(fixed >= 0) and np.allclose(fixed.sum(-1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(fixed[1], [0.5, 0.25, 0.25, 0.0])
    for bad in ([np.nan, 1.0], [np.inf, 1.0], [0.0, -0.1], [0.0, 0.0]):
        fixed = as_distributions(np.array([[0.75, 0.25], bad]))
        np.testing.assert_array_equal(fixed, [[0.75, 0.25], [0.5, 0.5]])
