"""The noise the mechanisms add is the noise the accountant prices."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from app.privacy.adadpsyn import adadpsyn_aggregate
from app.privacy.mechanisms import GaussianMechanism
from app.privacy.params import AdaDPSynParams, TangParams
from app.privacy.rng import make_rng
from app.privacy.tang import gaussian_aggregate

# Two-sided chi-square test of the sample variance at this level: with a random seed, a
# correct implementation fails with probability 1e-6. The seeds below are fixed.
FALSE_FAILURE_RATE = 1e-6


def assert_std(samples: np.ndarray, expected_std: float) -> None:
    """Chi-square test that ``samples`` (i.i.d., mean 0) have standard deviation ``expected``."""
    n = samples.size
    statistic = float(np.sum(samples**2)) / expected_std**2  # ~ chi2(n) for mean-zero noise
    low = stats.chi2.ppf(FALSE_FAILURE_RATE / 2, n)
    high = stats.chi2.isf(FALSE_FAILURE_RATE / 2, n)
    assert low <= statistic <= high, (
        f"empirical std {math.sqrt(statistic / n) * expected_std:.5g} vs {expected_std:.5g}"
    )


class RecordingGenerator:
    """Wraps a Generator and records the scale of every Gaussian draw."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self.scales: list[float] = []
        self.draws: list[np.ndarray] = []

    def normal(self, loc=0.0, scale=1.0, size=None):
        # A stack of steps draws with one scale per row; record each row's scale.
        self.scales.extend(float(x) for x in np.ravel(scale))
        self.draws.append(np.asarray(self._rng.normal(loc, scale, size)))
        return self.draws[-1]

    def __getattr__(self, name):
        return getattr(self._rng, name)


@pytest.mark.parametrize(("M", "sigma"), [(10, 0.7), (40, 2.5)])
def test_tang_noise_has_the_accounted_std(M, sigma):
    K = 25
    probs = make_rng(1).dirichlet(np.ones(K), size=M)
    rng = make_rng(2)
    noise = np.concatenate(
        [
            gaussian_aggregate(probs, TangParams(sigma=sigma), rng).distribution - probs.mean(0)
            for _ in range(2000)
        ]
    )
    assert_std(noise, sigma * math.sqrt(2) / M)


@pytest.mark.parametrize(("sensitivity", "multiplier"), [(2.0, 15.0), (1.0, 5.0), (0.05, 1.09)])
def test_gaussian_mechanism_noise_std(sensitivity, multiplier):
    mechanism = GaussianMechanism("test", sensitivity, multiplier)
    noise = mechanism.release(np.zeros(100_000), make_rng(3))
    assert_std(noise, multiplier * sensitivity)


def test_tang_mechanism_is_a_mean_with_sensitivity_sqrt2_over_m():
    probs = make_rng(4).dirichlet(np.ones(5), size=8)
    result = gaussian_aggregate(probs, TangParams(sigma=0.9), make_rng(5))
    (mechanism,) = result.released
    assert mechanism.sensitivity == pytest.approx(math.sqrt(2) / 8)
    assert mechanism.std == pytest.approx(0.9 * math.sqrt(2) / 8)


@pytest.mark.parametrize("seed", range(5))
def test_adadpsyn_draws_exactly_the_noise_the_event_prices(seed):
    """Every Gaussian draw of AdaDPSyn has the std implied by the priced multipliers.

    The recorded scales must be: GoodRadius comparisons 2*sigma0, then projected means
    2*R*sigma1/M for the radii the run reports, and coverage checks sigma2; and no multiplier
    may be used more often than the event of one token step counts it.
    """
    M, K = 20, 30
    centre = make_rng(seed).dirichlet(np.ones(K) * 0.3)
    probs = np.clip(centre + make_rng(seed + 10).normal(0, 0.002, (M, K)), 0, None)
    probs /= probs.sum(axis=1, keepdims=True)
    params = AdaDPSynParams(sigma0=15, sigma1=1.09, sigma2=5, T=3, lam=0.2)
    rng = RecordingGenerator(seed)
    result = adadpsyn_aggregate(probs, params, rng)

    radii = result.diagnostics["radii"]
    expected_means = [2 * r * params.sigma1 / M for r in radii]
    assert [s for s in rng.scales if s not in (2 * params.sigma0, params.sigma2)] == (
        pytest.approx(expected_means)
    )
    assert rng.scales.count(2 * params.sigma0) == 6  # 3 halvings x 2 comparisons
    for mechanism in result.released:
        assert mechanism.std == pytest.approx(mechanism.noise_multiplier * mechanism.sensitivity)

    used = Counter(m.noise_multiplier for m in result.released)
    priced = {e.noise_multiplier: e.count for e in params.round_events()}
    assert all(used[multiplier] <= priced[multiplier] for multiplier in used)


def test_production_generators_are_independent():
    """Without a seed every generator is fresh: two jobs never share noise."""
    a, b = make_rng(), make_rng()
    assert not np.array_equal(a.normal(size=8), b.normal(size=8))


def test_noise_does_not_repeat_across_token_steps():
    """One generator across the token loop: consecutive steps get different noise."""
    probs = np.full((10, 6), 1 / 6)
    rng = make_rng(7)
    outputs = [gaussian_aggregate(probs, TangParams(sigma=1.0), rng).distribution for _ in range(3)]
    assert not np.allclose(outputs[0], outputs[1])
    assert not np.allclose(outputs[1], outputs[2])
