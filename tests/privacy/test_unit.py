"""The count release that keeps the unit for counts (issue 32), cross-checked against
dp-accounting (and autodp for the RDP side), as every other mechanism here is."""

from __future__ import annotations

import math

import numpy as np
import pytest
from autodp import rdp_bank
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import (
    GaussianMechanism,
    PoissonSubsampledGaussianMechanism,
)

from app.privacy.accounting import PaperRdpAccountant, TightPldAccountant
from app.privacy.events import (
    GaussianEvent,
    LabelEvent,
    PoissonSampling,
    SampledEvent,
    SynthesisEvent,
    from_dict,
    to_dict,
)
from app.privacy.rng import make_rng
from app.privacy.unit import (
    CountRelease,
    count_noise_multiplier,
    gaussian_delta,
    gaussian_epsilon,
    posterior_mean,
    release_counts,
)

TOLERANCE = 0.02


def dp_accounting_delta(sigma: float, epsilon: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_event.GaussianDpEvent(sigma))
    return accountant.get_delta(epsilon)


@pytest.mark.parametrize("sigma, epsilon", [(0.5, 1.0), (2.0, 0.3), (10.0, 0.2), (40.0, 0.05)])
def test_the_gaussian_delta_formula_matches_dp_accounting(sigma, epsilon):
    ours = gaussian_delta(sigma, epsilon)
    assert ours == pytest.approx(dp_accounting_delta(sigma, epsilon), rel=TOLERANCE, abs=1e-9)


@pytest.mark.parametrize("sigma, delta", [(0.8, 1e-6), (5.0, 5e-8), (22.0, 5e-8), (90.0, 1e-7)])
def test_the_gaussian_epsilon_is_dp_accountings(sigma, delta):
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_event.GaussianDpEvent(sigma))
    assert gaussian_epsilon(sigma, delta) == pytest.approx(
        accountant.get_epsilon(delta), rel=TOLERANCE, abs=1e-4
    )


@pytest.mark.parametrize("epsilon", [0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("delta", [5e-8, 1e-6])
def test_the_count_release_costs_what_it_is_given_and_no_less_noise_would(epsilon, delta):
    sigma = count_noise_multiplier(epsilon, delta)
    assert dp_accounting_delta(sigma, epsilon) <= delta * (1 + TOLERANCE)
    assert dp_accounting_delta(sigma * 0.98, epsilon) > delta  # the smallest, within 2 %


def test_the_count_release_is_the_gaussian_mechanism_on_each_count():
    """Its noise is N(0, sigma^2) per label, independent across labels (20,000 draws: the
    standard error of the mean is sigma / 141, of the std about sigma / 200), not rounded;
    the exact count only shifts it."""
    rng = make_rng(7)
    n = 20_000
    releases = [release_counts({"a": 500, "b": 900}, 0.2, 5e-8, rng) for _ in range(n)]
    sigma = releases[0].sigma
    noise = np.array([list(r.noisy.values()) for r in releases]) - np.array([500, 900])
    assert abs(noise.mean(axis=0)).max() < 4 * sigma / math.sqrt(n)
    assert np.allclose(noise.std(axis=0), sigma, rtol=0.03)
    assert abs(np.corrcoef(noise.T)[0, 1]) < 0.03


def _grid_posterior_mean(noisy: float, sigma: float) -> float:
    """The posterior mean of a count n >= 1 given n + N(0, sigma^2) = ``noisy`` under a
    flat prior, by summing over the integers (an independent computation)."""
    n = np.arange(1, int(max(noisy, 0) + 40 * sigma) + 2, dtype=float)
    weights = np.exp(-0.5 * ((noisy - n) / sigma) ** 2)
    return float((n * weights).sum() / weights.sum())


@pytest.mark.parametrize(
    "noisy, sigma", [(500.0, 10.0), (86.0, 22.0), (3.0, 22.0), (-20.0, 90.0), (-400.0, 90.0)]
)
def test_a_count_is_planned_at_its_posterior_mean_never_at_a_floor(noisy, sigma):
    ours = posterior_mean(noisy, sigma)
    assert ours == pytest.approx(_grid_posterior_mean(noisy, sigma), rel=0.01, abs=0.6)
    assert ours >= 1
    if noisy < 1:  # the floor a rounding would give is far below the posterior mean
        assert ours > 10


def test_the_share_of_tiny_planned_counts_is_small_where_a_floor_made_it_large():
    """TREC's smallest label (86 records) released with sigma 90 (epsilon 0.05 at 5e-8, the
    default share of a budget of 1): the old floor of 1 set the rate to 1 about 18 % of the
    time; the posterior mean plans with fewer than 40 records (M N at M 20, N 2) in well
    under 3 %."""
    sigma = count_noise_multiplier(0.05, 5e-8)
    rng = make_rng(11)
    noisy = 86 + rng.normal(0, sigma, size=20_000)
    floored = np.maximum(1, np.round(noisy))
    planned = np.array([posterior_mean(y, sigma) for y in noisy])
    assert (floored <= 1).mean() > 0.1
    assert (planned < 40).mean() < 0.03


def test_a_release_round_trips_and_plans_with_its_estimates():
    release = release_counts({"a": 10, "b": 0}, 0.5, 5e-8, make_rng(3), "r1")
    again = CountRelease.from_dict(release.to_dict())
    assert again == release and again.estimates() == release.estimates()
    assert min(release.estimates().values()) >= 1
    assert release.epsilon_at(release.delta) == pytest.approx(0.5, rel=0.01)
    labels = [part.label for part in release.event().events]
    assert labels == ["a", "b"]


def _job(count_sigma: float | None, rate: float, sigma: float, steps: int) -> SynthesisEvent:
    rounds = SampledEvent(PoissonSampling(rate=rate, groups=4), (GaussianEvent(sigma),), steps)
    release = None if count_sigma is None else GaussianEvent(count_sigma)
    return SynthesisEvent((LabelEvent("a", rounds, release), LabelEvent("b", rounds, release)))


@pytest.mark.parametrize(
    "count_sigma, rate, sigma, steps, delta",
    [(25.0, 0.05, 1.1, 60, 1e-6), (8.0, 0.2, 2.5, 15, 1e-5), (60.0, 0.01, 0.9, 200, 1e-6)],
)
def test_a_job_with_its_count_release_matches_dp_accounting(count_sigma, rate, sigma, steps, delta):
    """The tight accountant composes each label's count release with its rounds: the same
    epsilon as dp-accounting's own PLD accountant on Gaussian + Poisson-sampled Gaussian
    rounds, and more than the rounds alone."""
    ours = TightPldAccountant(cached=False).dataset_epsilon(
        _job(count_sigma, rate, sigma, steps), delta
    )
    reference = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    reference.compose(dp_event.GaussianDpEvent(count_sigma))
    reference.compose(dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(sigma)), steps)
    assert ours == pytest.approx(reference.get_epsilon(delta), rel=TOLERANCE)
    rounds_only = TightPldAccountant(cached=False).dataset_epsilon(
        _job(None, rate, sigma, steps), delta
    )
    assert ours > rounds_only


@pytest.mark.parametrize(
    "count_sigma, rate, sigma, steps, delta",
    [(25.0, 0.05, 1.1, 60, 1e-6), (8.0, 0.2, 2.5, 15, 1e-5), (60.0, 0.01, 0.9, 200, 1e-6)],
)
def test_a_job_with_its_count_release_lies_within_the_prv_accountants_bounds(
    count_sigma, rate, sigma, steps, delta
):
    """An accountant independent of dp-accounting (which the tight accountant is built on):
    the PRV accountant composes the count release with the rounds and bounds the true
    epsilon; ours (pessimistic) is never below its lower bound and at most 2% above its
    upper one."""
    ours = TightPldAccountant(cached=False).dataset_epsilon(
        _job(count_sigma, rate, sigma, steps), delta
    )
    prvs = [GaussianMechanism(count_sigma), PoissonSubsampledGaussianMechanism(rate, sigma)]
    accountant = PRVAccountant(
        prvs, max_self_compositions=[1, steps], eps_error=0.01, delta_error=delta / 1000
    )
    lower, _, upper = accountant.compute_epsilon(delta, [1, steps])
    assert lower <= ours <= upper * 1.02, (lower, ours, upper)


@pytest.mark.parametrize("sigma, count", [(3.0, 1), (20.0, 2)])
def test_the_paper_accountant_prices_a_plain_gaussian_as_dp_accounting_and_autodp(sigma, count):
    delta = 1e-5
    ours = PaperRdpAccountant().epsilon(GaussianEvent(sigma, count), delta)
    reference = rdp_privacy_accountant.RdpAccountant(list(range(2, 257)))
    reference.compose(dp_event.GaussianDpEvent(sigma), count)
    assert ours == pytest.approx(reference.get_epsilon(delta), rel=TOLERANCE)
    orders = np.arange(2, 257)
    autodp_curve = count * np.array([rdp_bank.RDP_gaussian({"sigma": sigma}, a) for a in orders])
    assert np.allclose(PaperRdpAccountant(orders).rdp(GaussianEvent(sigma, count)), autodp_curve)


def test_a_count_release_round_trips_and_older_events_read_without_one():
    event = _job(25.0, 0.05, 1.1, 60)
    assert from_dict(to_dict(event)) == event
    stored = to_dict(_job(None, 0.05, 1.1, 60))
    assert all("count_release" not in entry for entry in stored["labels"])
    assert from_dict(stored) == _job(None, 0.05, 1.1, 60)
