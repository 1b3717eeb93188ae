"""The pooled AdaDPSyn variant: every charged mean is spent, nothing uncharged runs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.privacy.adadpsyn import adadpsyn_aggregate
from app.privacy.geometry import SIMPLEX_RADIUS, project_onto_simplex, to_simplex
from app.privacy.good_radius import good_radius
from app.privacy.params import (
    AdaDPSynParams,
    AdaDPSynVariant,
    adadpsyn_defaults,
    binary_search_steps,
)
from app.privacy.rng import make_rng
from tests.privacy.test_noise import RecordingGenerator, assert_std

POOLED = AdaDPSynVariant.POOLED


def cluster(M: int, K: int, spread: float, seed: int) -> np.ndarray:
    """M distributions close to one peaked distribution."""
    rng = make_rng(seed)
    base = np.full(K, 0.2 / (K - 1))
    base[0] = 0.8
    return np.array([to_simplex(row) for row in base + rng.normal(0.0, spread, size=(M, K))])


def failing_checks(T: int, sigma1: float, **extra: object) -> AdaDPSynParams:
    """Pooled parameters whose every check fails: no noisy count reaches M + 10 sigma2."""
    return AdaDPSynParams(
        variant=POOLED,
        good_radius=False,
        sigma1=sigma1,
        sigma2=0.01,
        T=T,
        mu=1.0,
        coverage_margin=10.0,
        **extra,
    )


def charged_counts(params: AdaDPSynParams) -> Counter:
    return Counter({e.noise_multiplier: e.count for e in params.round_events()})


def released_counts(result) -> Counter:
    return Counter(m.noise_multiplier for m in result.released)


@pytest.mark.parametrize("mu", [0.3, 1.0])  # 1.0: the first coverage check stops the loop
@pytest.mark.parametrize("T", [1, 3])
def test_pooled_runs_every_charged_mean_and_nothing_uncharged(T, mu):
    margin = 0.0 if mu < 1 else 10.0  # no noisy count reaches M + 10 sigma2
    params = AdaDPSynParams(
        variant=POOLED,
        good_radius=False,
        sigma1=0.7,
        sigma2=4.0,
        T=T,
        mu=mu,
        coverage_margin=margin,
    )
    result = adadpsyn_aggregate(cluster(20, 30, 0.01, 1), params, make_rng(2))
    charged, released = charged_counts(params), released_counts(result)
    assert released[params.sigma1] == T + 1  # all charged means, however the loop stopped
    assert all(released[s] <= charged[s] for s in released)
    assert len(result.diagnostics["radii"]) == T + 1
    if mu == 1.0:
        assert result.diagnostics["stopped_by"] == "coverage"
        assert result.diagnostics["radii"] == [SIMPLEX_RADIUS] * (T + 1)


def test_pooled_with_good_radius_charges_and_runs_its_comparisons():
    params = AdaDPSynParams(variant=POOLED, good_radius=True, sigma0=3.0, sigma1=0.7, T=2)
    result = adadpsyn_aggregate(cluster(20, 30, 0.01, 3), params, make_rng(4))
    comparisons = 2 * binary_search_steps(params.theta)
    assert charged_counts(params)[3.0] == comparisons
    assert released_counts(result)[3.0] == comparisons
    without = params.model_copy(update={"good_radius": False})
    assert 3.0 not in charged_counts(without)


def test_pooled_noise_is_the_inverse_variance_combination_of_all_means():
    """With no reduction (every check fails), the output is the average of T + 1 full-radius
    means: its noise std is 2 R sigma1 / (M sqrt(T + 1)). Using only the last mean, as the
    paper does, would give sqrt(T + 1) times more."""
    M, K, T, sigma1 = 10, 5, 3, 0.5
    params = failing_checks(T, sigma1)
    # The centre of the simplex; the centres stay within ~0.1 of it, so balls of radius
    # sqrt(2)/2 around them clip nothing and every mean is unbiased.
    probs = np.full((M, K), 1.0 / K)
    rng = make_rng(5)
    pooled = []
    for _ in range(3000):
        recorder = RecordingGenerator(int(rng.integers(2**31)))
        result = adadpsyn_aggregate(probs, params, recorder)
        assert result.diagnostics["stopped_by"] == "coverage"
        pooled.append(_raw_estimate(result, recorder, probs, params))
    noise = np.concatenate(pooled) - 1.0 / K
    assert_std(noise, 2 * SIMPLEX_RADIUS * sigma1 / (M * math.sqrt(T + 1)))


def _raw_estimate(result, recorder, probs, params) -> np.ndarray:
    """Recompute the pooled estimate before the simplex projection from the recorded draws:
    the aggregator's output must be its projection."""
    # Means of a stack of one step are 1 x K draws; coverage draws have one entry per step.
    means = [d[0] for d in recorder.draws if d.ndim == 2]
    radii = result.diagnostics["radii"]
    weights = np.array([1 / r**2 for r in radii])
    estimate = sum(w * (probs.mean(0) + d) for w, d in zip(weights, means, strict=True))
    estimate = estimate / weights.sum()
    np.testing.assert_allclose(project_onto_simplex(estimate), result.distribution, atol=1e-12)
    assert len(means) == params.T + 1
    return estimate


def test_pooled_beats_the_paper_variant_on_agreeing_teachers():
    """At one sigma1 the pooled output is closer to the clean mean (more means, better
    centres); this is the benchmark's finding in miniature."""
    probs = cluster(10, 40, 0.02, 6)
    clean = probs.mean(axis=0)
    constants = {"sigma1": 1.0, "sigma0": 10.0, "sigma2": 3.0, "T": 1}
    paper = AdaDPSynParams(variant=AdaDPSynVariant.PAPER, **constants)
    pooled = AdaDPSynParams(variant=POOLED, good_radius=True, **constants)
    rng = make_rng(7)
    errors = {
        name: np.mean(
            [
                np.linalg.norm(
                    project_onto_simplex(adadpsyn_aggregate(probs, p, rng).distribution) - clean
                )
                for _ in range(400)
            ]
        )
        for name, p in (("paper", paper), ("pooled", pooled))
    }
    assert errors["pooled"] < 0.8 * errors["paper"]


simplex_inputs = st.integers(2, 40).flatmap(
    lambda k: st.lists(
        st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 6)), min_size=k, max_size=k
    )
)


@settings(max_examples=200, deadline=None)
@given(vector=simplex_inputs, seed=st.integers(0, 2**32 - 1))
def test_simplex_projection_is_nearest_and_keeps_the_argmax(vector, seed):
    vector = np.array(vector)
    projected = project_onto_simplex(vector)
    assert np.all(projected >= 0) and math.isclose(projected.sum(), 1.0, rel_tol=1e-9)
    assert vector[np.argmax(projected)] == vector.max()
    other = make_rng(seed).dirichlet(np.ones(len(vector)))  # any distribution
    assert np.linalg.norm(projected - other) <= np.linalg.norm(vector - other) + 1e-9
    np.testing.assert_allclose(project_onto_simplex(projected), projected, atol=1e-12)


def test_good_radius_slack_finds_a_tight_cluster_that_the_capped_test_misses():
    """L is capped at t, so without slack a true 'L(r) >= t' passes half the time."""
    points = cluster(40, 20, 0.002, 8)
    t = 32

    def mean_radius(slack: float) -> float:
        rng = make_rng(9)
        return float(
            np.mean(
                [
                    good_radius(points, t=t, sigma0=2.0, theta=0.05, rng=rng, slack=slack)
                    for _ in range(200)
                ]
            )
        )

    assert mean_radius(2.0) < 0.5 * mean_radius(0.0)


@pytest.mark.parametrize(
    ("M", "variant", "expected"),
    [
        (10, AdaDPSynVariant.PAPER, {"T": 1, "sigma0": 10.0, "sigma2": 3.0}),
        (6, AdaDPSynVariant.PAPER, {"T": 1, "sigma0": 10.0, "sigma2": 3.0}),
        (20, AdaDPSynVariant.PAPER, {"T": 2, "sigma0": 15.0, "sigma2": 5.0}),
        (40, AdaDPSynVariant.PAPER, {"T": 2, "sigma0": 15.0, "sigma2": 5.0}),
        (10, POOLED, {"T": 1, "good_radius": False}),
    ],
)
def test_constants_follow_m(M, variant, expected):
    defaults = adadpsyn_defaults(M, variant)
    assert defaults["variant"] is variant
    assert {k: defaults[k] for k in expected} == expected
    AdaDPSynParams(sigma1=1.0, **defaults)  # valid parameters
