"""The filter's currency checked against independent code, and its properties
(:mod:`app.privacy.filter`, :mod:`app.privacy.rdp`).

* The Poisson-subsampled Gaussian's Rényi DP (Mironov, Talwar and Zhang 2019) against
  dp-accounting's ``RdpAccountant`` and autodp's analytical accountant, and against a
  quadrature of both Rényi divergences (the curve is the remove order's and bounds the add
  order's, which is what the filter needs of it).
* The Rényi filter's conversion, written here from the paper, and dp-accounting's
  ``compute_epsilon`` at each order's share of the delta; the one-batch rule on one job is
  the tight accountant's epsilon at the other half of the delta.
* Properties: adaptive jobs cost more than their PLD composition and at most the sum of
  their epsilons; declared in one batch they cost less; the price never falls when a job is
  added; each budget's weights sum to 1 and its centre order falls as its epsilon grows.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from autodp import rdp_acct, rdp_bank
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from scipy.special import logsumexp
from scipy.stats import norm

from app.privacy import rdp
from app.privacy.accounting import TightPldAccountant
from app.privacy.events import (
    RELATIONS,
    DatasetEvent,
    GaussianEvent,
    LaplaceEvent,
    PartitionEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
)
from app.privacy.filter import (
    GRID,
    FilterParams,
    Item,
    Release,
    Rule,
    price,
    rdp_curve,
)
from app.privacy.sampling import PoissonSampling
from app.privacy.unit import count_noise_multiplier, gaussian_epsilon

ACCOUNTANT = TightPldAccountant()
ORDERS = np.array([2, 3, 4, 5, 8, 12, 16, 32, 64, 128, 256])


@functools.cache
def random_pairs() -> list[tuple[float, float]]:
    """20 (rate, sigma) pairs: rates log-uniform in [1e-3, 0.9], sigmas in [0.4, 20]."""
    rng = np.random.default_rng(2602_06756)
    rates = np.exp(rng.uniform(math.log(1e-3), math.log(0.9), 20))
    sigmas = np.exp(rng.uniform(math.log(0.4), math.log(20.0), 20))
    return [(float(q), float(s)) for q, s in zip(rates, sigmas, strict=True)]


def dp_accounting_rdp(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    accountant = dp_rdp.RdpAccountant(orders=[float(a) for a in orders])
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)))
    return np.asarray(accountant._rdp)  # its only view of the curve


def autodp_rdp(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """autodp's analytical accountant, Poisson-subsampled mechanism ("the exact formula of
    Poisson-subsampled RDP for ... the Gaussian", Zhu and Wang 2019), its binomial tables
    built up to the largest order."""
    accountant = rdp_acct.anaRDPacct(m=int(orders.max()))
    gaussian = functools.partial(lambda s, a: rdp_bank.RDP_gaussian({"sigma": s}, a), sigma)
    accountant.compose_poisson_subsampled_mechanisms(gaussian, q)
    return np.asarray(accountant.get_rdp(orders))


def test_poisson_subsampled_gaussian_rdp_matches_dp_accounting_and_autodp() -> None:
    """Within 1e-9 relative of dp-accounting and 1e-6 of autodp (each sums the same
    series its own way; the worst seen: 4e-11 and 2e-9), at 11 integer orders up to 256 on
    20 random pairs; and the filter's curve of a job is its steps times the same."""
    for q, sigma in random_pairs():
        ours = rdp.poisson_subsampled_gaussian_rdp(q, sigma, ORDERS)
        assert np.all(np.isfinite(ours)) and np.all(ours > 0)
        np.testing.assert_allclose(ours, dp_accounting_rdp(q, sigma, ORDERS), rtol=1e-9)
        np.testing.assert_allclose(ours, autodp_rdp(q, sigma, ORDERS), rtol=1e-6)
        job = SampledEvent(PoissonSampling(q, 4), (GaussianEvent(sigma),), 7)
        np.testing.assert_allclose(rdp_curve(job, tuple(ORDERS.tolist())), 7 * ours, rtol=1e-12)


def _log_renyi_moment(q: float, s: float, a: int, remove: bool) -> float:
    """log E_Q[(P/Q)^a] by quadrature: P = (1-q) N(0, s^2) + q N(1, s^2) against
    Q = N(0, s^2) (``remove``), or Q against P."""
    x = np.linspace(-14 * s - 2 * a / s, 14 * s + 2 + 2 * a / s, 100_001)
    log_null = norm.logpdf(x, 0, s)
    log_mix = np.logaddexp(math.log1p(-q) + log_null, math.log(q) + norm.logpdf(x, 1, s))
    top, bottom = (log_mix, log_null) if remove else (log_null, log_mix)
    return float(logsumexp(a * top + (1 - a) * bottom) + math.log(x[1] - x[0]))


@pytest.mark.parametrize(("q", "s"), [(0.01, 0.8), (0.2, 1.5), (0.5, 3.0), (0.05, 5.0)])
def test_the_curve_is_the_remove_divergence_and_bounds_the_add_one(q: float, s: float) -> None:
    """The Rényi filter charges one curve for both orders of the pair: it must be the
    remove order's divergence (exact) and at least the add order's (Mironov et al. 2019,
    Theorem 5), here checked by quadrature rather than taken from the paper."""
    orders = np.array([2, 3, 5, 8, 12, 16])
    curve = rdp.poisson_subsampled_gaussian_rdp(q, s, orders)
    for a, value in zip(orders, curve, strict=True):
        remove = _log_renyi_moment(q, s, int(a), remove=True) / (a - 1)
        add = _log_renyi_moment(q, s, int(a), remove=False) / (a - 1)
        assert value == pytest.approx(remove, rel=1e-6, abs=1e-12), (a, value, remove)
        assert add <= value * (1 + 1e-9), (a, add, value)


# --- the conversion and the one-batch rule ----------------------------------------------

BUDGETS = [(0.3, 1e-5), (1.0, 1e-6), (4.0, 1e-6), (20.0, 1e-6), (50.0, 1e-9)]


def paper_epsilon(curve: np.ndarray, params: FilterParams) -> float:
    """The Rényi filter's spend from the paper's conversion (Balle et al. 2020): min over
    the orders a of rho(a) + log(1 - 1/a) - (log delta_a + log a) / (a - 1), delta_a = w_a
    times the filter's half of the budget's delta."""
    best = math.inf
    for a, rho, w in zip(params.orders, curve, params.weights, strict=True):
        delta_a = w * params.delta * 0.5
        best = min(best, rho + math.log(1 - 1 / a) - (math.log(delta_a) + math.log(a)) / (a - 1))
    return max(0.0, best)


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_the_renyi_spend_is_the_paper_conversion(epsilon: float, delta: float) -> None:
    """On random compositions of subsampled Gaussians (curves from dp-accounting, not the
    code under test), the filter's spend equals the paper's formula written here, and
    dp-accounting's compute_epsilon applied at each order with its delta share."""
    params = FilterParams.for_budget(epsilon, delta)
    assert params.orders == GRID and params.renyi_delta == pytest.approx(delta / 2, rel=1e-15)
    rng = np.random.default_rng(int(epsilon * 1000))
    orders = np.asarray(params.orders)
    for _ in range(5):
        jobs = [
            (rng.uniform(0.005, 0.5), rng.uniform(0.6, 8.0), rng.integers(1, 200)) for _ in range(3)
        ]
        curve = sum(steps * dp_accounting_rdp(q, s, orders) for q, s, steps in jobs)
        ours = params.renyi_epsilon(curve)
        assert ours == pytest.approx(paper_epsilon(curve, params), rel=1e-12, abs=1e-12)
        per_order = [
            dp_rdp.compute_epsilon([float(a)], [float(r)], w * params.renyi_delta)[0]
            for a, r, w in zip(orders, curve, params.weights, strict=True)
        ]
        assert ours == pytest.approx(min(per_order), rel=1e-12, abs=1e-12)


def _job(sigma: float, rate: float = 0.1, steps: int = 10) -> SampledEvent:
    return SampledEvent(PoissonSampling(rate, 1), (GaussianEvent(sigma),), steps)


@pytest.mark.parametrize(
    "event",
    [
        GaussianEvent(3.0),
        _job(1.1),
        RandomizedResponseEvent(0.3, 4, relations=RELATIONS),
        PartitionEvent("a", _job(0.9, 0.05, 30)),
    ],
    ids=["gaussian", "sampled", "randomized_response", "partition"],
)
def test_one_job_is_priced_at_the_tight_epsilon_at_half_the_delta(event: DatasetEvent) -> None:
    """A job alone is a batch of one: its one-batch price is the tight accountant's epsilon
    at the budget's delta less the Rényi filter's half; with a count release, the release's
    epsilon plus the job's at what is left of that half (basic composition)."""
    params = FilterParams.for_budget(10.0, 1e-6)
    group = price(params, ACCOUNTANT, [Item(event, "alone")]).groups[0]
    assert group.one_batch == pytest.approx(ACCOUNTANT.epsilon(event, 0.5e-6), rel=1e-12)
    assert group.epsilon == min(group.one_batch, group.renyi)
    sigma = count_noise_multiplier(0.5, 5e-8)
    release = Release(sigma, gaussian_epsilon(sigma, 5e-8), 5e-8)
    group = price(params, ACCOUNTANT, [Item(event, "alone")], [release]).groups[0]
    expected = release.epsilon + ACCOUNTANT.epsilon(event, 0.5e-6 - 5e-8)
    assert group.one_batch == pytest.approx(expected, rel=1e-12)
    # the release enters the Rényi filter as one more Gaussian of its multiplier
    curve = rdp_curve(ACCOUNTANT.resolve(ACCOUNTANT.priced(event)[0][1]), params.orders)
    curve = curve + np.asarray(params.orders) / (2 * sigma**2)
    assert group.renyi == pytest.approx(paper_epsilon(curve, params), rel=1e-12)


# --- properties --------------------------------------------------------------------------

BUDGET_EPSILON, BUDGET_DELTA = 20.0, 1e-6
TARGETS = ((0.5, 0.01, 200), (2.0, 0.1, 20), (5.0, 0.5, 3))  # epsilon, rate, steps


def _calibrated(target: float, rate: float, steps: int) -> SampledEvent:
    """The job of least noise (within 1e-4 relative) whose tight epsilon at BUDGET_DELTA is
    at most ``target``."""
    lo, hi = 0.2, 50.0
    while hi / lo > 1 + 1e-4:
        mid = math.sqrt(lo * hi)
        if ACCOUNTANT.epsilon(_job(mid, rate, steps), BUDGET_DELTA) <= target:
            hi = mid
        else:
            lo = mid
    return _job(hi, rate, steps)


@functools.cache
def heterogeneous_jobs() -> tuple[SampledEvent, ...]:
    return tuple(_calibrated(*target) for target in TARGETS)


def test_adaptive_jobs_cost_more_than_their_composition_and_at_most_their_sum() -> None:
    jobs = heterogeneous_jobs()
    alone = [ACCOUNTANT.epsilon(job, BUDGET_DELTA) for job in jobs]
    assert alone == pytest.approx([t[0] for t in TARGETS], rel=2e-3)
    params = FilterParams.for_budget(BUDGET_EPSILON, BUDGET_DELTA)
    spend = price(params, ACCOUNTANT, [Item(job, f"job-{i}") for i, job in enumerate(jobs)])
    composed = ACCOUNTANT.epsilon(list(jobs), BUDGET_DELTA)
    assert spend.rule is Rule.RENYI_FILTER
    assert spend.composed == pytest.approx(composed, rel=1e-12)
    assert composed < spend.epsilon <= math.fsum(alone), (composed, spend.epsilon, sum(alone))
    one_batch = price(params, ACCOUNTANT, [Item(job, "batch") for job in jobs])
    assert one_batch.rule is Rule.ONE_BATCH
    assert one_batch.epsilon == pytest.approx(ACCOUNTANT.epsilon(list(jobs), BUDGET_DELTA / 2))
    assert composed < one_batch.epsilon < spend.epsilon


def _random_event(rng: np.random.Generator) -> DatasetEvent:
    kind = rng.integers(0, 5)
    if kind == 0:
        event: DatasetEvent = GaussianEvent(float(rng.uniform(2.0, 12.0)))
    elif kind == 1:
        event = _job(
            float(rng.uniform(0.8, 3.0)), float(rng.uniform(0.05, 0.5)), int(rng.integers(1, 6))
        )
    elif kind == 2:
        p, k = float(rng.uniform(0.3, 0.9)), int(rng.integers(2, 5))
        event = RandomizedResponseEvent(p, k, relations=RELATIONS)
    elif kind == 3:
        event = PureDpEvent(float(rng.uniform(0.05, 0.5)))
    else:
        event = LaplaceEvent(float(rng.uniform(2.0, 10.0)))
    labels = [None, "a", "b"]
    label = labels[int(rng.integers(0, 3))]
    return event if label is None else PartitionEvent(label, event)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_price_never_falls_when_a_job_is_added(seed: int) -> None:
    """Random sequences of mixed jobs (plain and subsampled Gaussians, randomized response,
    pure DP, Laplace; on one label partition or every record), each in a new batch or in one
    already used: the spend is monotone, so the filter's stopping rule is."""
    rng = np.random.default_rng(seed)
    params = FilterParams.for_budget(10.0, 1e-6)
    items: list[Item] = []
    before = 0.0
    for index in range(7):
        batch = f"b{rng.integers(0, index + 1)}"  # an old batch, or a new one
        items.append(Item(_random_event(rng), batch))
        after = price(params, ACCOUNTANT, items)
        assert after.epsilon >= before * (1 - 1e-12), (index, before, after)
        for group in after.groups:
            assert group.epsilon == min(group.renyi, group.one_batch)
        before = after.epsilon


def test_weights_sum_to_one_and_the_centre_falls_as_the_budget_grows() -> None:
    centres = []
    for delta in (1e-5, 1e-6, 1e-9):
        last = math.inf
        for epsilon in (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0):
            params = FilterParams.for_budget(epsilon, delta)
            weights = np.asarray(params.weights)
            assert math.fsum(params.weights) == pytest.approx(1.0, abs=1e-12)
            assert np.all(weights > 0) and len(weights) == len(params.orders)
            centre = params.orders[int(np.argmax(weights))]
            assert weights.max() == 0.5 and centre <= last
            last = centre
            centres.append((delta, epsilon, centre))
    by_delta = {d: [c for dd, _, c in centres if dd == d] for d, _, _ in centres}
    for series in by_delta.values():
        assert series[-1] < series[0]
