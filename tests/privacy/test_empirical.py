"""The black-box empirical audit (app/privacy/empirical.py): its Clopper-Pearson bounds against
two independent implementations, its confidence on honest mechanisms (with a positive
control for the check itself), its power on under-priced ones, and its choice of view,
direction and event.

The mechanisms are simulated with numpy, seeded: k-ary randomized response at a known
epsilon is (epsilon, 0)-DP and tight (the event {true value} has ratio exactly e^epsilon), so
an honest one is the hardest case for the audit's confidence and an under-priced one the
plainest case for its power.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping

import numpy as np
import pytest
from scipy import stats

from app.privacy.empirical import (
    BACKWARD,
    FORWARD,
    clopper_pearson,
    epsilon_ceiling,
    epsilon_lower_bound,
    required_runs,
)

ALPHA = 0.05
DELTA = 1e-5
CLAIMED = 1.0
K = 4  # randomized response's labels
RUNS = 2000  # per dataset: the run count the power test holds the audit to

Runs = list[Mapping[str, Hashable]]


def randomized_response(
    epsilon: float, value: int, runs: int, rng: np.random.Generator
) -> np.ndarray:
    """K-ary randomized response on ``value``: kept with probability e^eps / (e^eps + K - 1),
    otherwise one of the other K - 1 labels uniformly."""
    keep = rng.random(runs) < math.exp(epsilon) / (math.exp(epsilon) + K - 1)
    other = rng.integers(0, K - 1, size=runs)
    other += other >= value
    return np.where(keep, value, other)


def as_runs(view: str, outputs: Iterable[Hashable]) -> Runs:
    return [{view: output} for output in outputs]


def rr_samples(epsilon: float, runs: int, seed: int) -> tuple[Runs, Runs]:
    """Runs on D (true label 0) and on D' (true label 1) under one view, ``label``."""
    rng = np.random.default_rng(seed)
    first = randomized_response(epsilon, 0, runs, rng).tolist()
    second = randomized_response(epsilon, 1, runs, rng).tolist()
    return as_runs("label", first), as_runs("label", second)


def rr_bound(epsilon: float, runs: int, seed: int) -> float:
    return epsilon_lower_bound(*rr_samples(epsilon, runs, seed), delta=DELTA).epsilon


def rate_above(exceedances: int, repetitions: int, rate: float) -> float:
    """p-value of a one-sided binomial test that the exceedance rate is above ``rate``."""
    return float(stats.binomtest(exceedances, repetitions, rate, alternative="greater").pvalue)


# --- Clopper-Pearson ------------------------------------------------------------------------

GRID = [
    (k, n, alpha)
    for n in (1, 2, 7, 30, 200, 1000)
    for k in sorted({0, 1, n // 3, n - 1, n})
    for alpha in (0.001, 0.025, 0.05, 0.2)
    if 0 <= k <= n
]


@pytest.mark.parametrize(("k", "n", "alpha"), GRID)
def test_clopper_pearson_matches_scipys_exact_binomial_interval(
    k: int, n: int, alpha: float
) -> None:
    """The two-sided exact interval at confidence 1 - 2 alpha is the two one-sided bounds at
    alpha each (scipy's binomtest, a separate implementation of the same definition)."""
    interval = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    lower, upper = clopper_pearson(k, n, alpha)
    assert lower == pytest.approx(interval.low, rel=1e-9, abs=1e-12)
    assert upper == pytest.approx(interval.high, rel=1e-9, abs=1e-12)
    assert (lower == 0.0) == (k == 0) and (upper == 1.0) == (k == n)


def test_clopper_pearson_covers_at_its_level() -> None:
    """Coverage from the definition, by exact binomial sums: P(p < lower) <= alpha."""
    n, alpha = 40, 0.05
    lowers = np.array([clopper_pearson(k, n, alpha)[0] for k in range(n + 1)])
    for p in np.linspace(0.01, 0.99, 50):
        assert stats.binom.pmf(np.arange(n + 1), n, p)[lowers > p].sum() <= alpha + 1e-12


@pytest.mark.parametrize(("k", "n", "alpha"), [(-1, 5, 0.05), (6, 5, 0.05), (0, 0, 0.05)])
def test_clopper_pearson_refuses_counts_outside_the_range(k: int, n: int, alpha: float) -> None:
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson(k, n, alpha)


# --- confidence: honest mechanisms ------------------------------------------------------------


def test_an_honest_mechanism_exceeds_its_epsilon_at_most_at_alphas_rate() -> None:
    """Negative control: 200 audits of a tight, honest mechanism; the rate at which the bound
    exceeds the true epsilon is not above alpha (one-sided binomial test at 1e-3)."""
    count = sum(rr_bound(CLAIMED, 1000, 1000 + r) > CLAIMED for r in range(200))
    assert rate_above(count, 200, ALPHA) > 1e-3


def test_the_exceedance_check_flags_an_audit_that_overstates_its_confidence() -> None:
    """Positive control for the check above: the same audit at alpha 0.5, read as if it were
    at 0.05, exceeds far more often than 5% and the same test says so."""
    count = sum(
        epsilon_lower_bound(*rr_samples(CLAIMED, 1000, 2000 + r), delta=DELTA, alpha=0.5).epsilon
        > CLAIMED
        for r in range(200)
    )
    assert rate_above(count, 200, ALPHA) < 1e-3


def test_a_mechanism_with_no_privacy_loss_shows_none() -> None:
    """Same output distribution on D and D' (100 keys, so the selection part finds chance
    events to fit): the bound is 0 in all but an alpha share."""
    positive = 0
    for seed in range(100):
        rng = np.random.default_rng(3000 + seed)
        first, second = (rng.integers(0, 10, size=(1000, 2)).tolist() for _ in range(2))
        result = epsilon_lower_bound(
            as_runs("pair", map(tuple, first)), as_runs("pair", map(tuple, second)), delta=DELTA
        )
        positive += result.epsilon > 0.0
    assert rate_above(positive, 100, ALPHA) > 1e-3


# --- power: under-priced mechanisms -----------------------------------------------------------


def test_a_mechanism_priced_at_half_its_epsilon_is_caught() -> None:
    """Randomized response at epsilon 2 claimed as 1: caught in >= 95% of 40 audits."""
    caught = sum(rr_bound(2 * CLAIMED, RUNS, 4000 + r) > CLAIMED for r in range(40))
    assert caught >= 38


def test_a_deterministic_leak_reaches_the_ceiling_of_its_run_count() -> None:
    """Output 'a' always on D, 'b' always on D': with 100 test runs, ln(100 / ln(2 / alpha))
    ~ 3.3, the most 200 runs can show (epsilon_ceiling)."""
    bound = epsilon_lower_bound(as_runs("out", ["a"] * 200), as_runs("out", ["b"] * 200), delta=0)
    assert bound.epsilon > 3.0
    assert bound.epsilon == pytest.approx(epsilon_ceiling(200, delta=0))
    assert bound.epsilon == pytest.approx(math.log(100 / math.log(2 / ALPHA)), abs=0.05)
    assert (bound.p_first, bound.p_second, bound.runs) == (1.0, 0.0, 200)


def test_delta_is_subtracted_from_the_lower_bound() -> None:
    """(eps, delta)-DP allows P(S|D) <= e^eps P(S|D') + delta: a leak of probability below
    delta shows nothing."""
    first = as_runs("out", ["a"] * 200)
    second = as_runs("out", ["b"] * 200)
    assert epsilon_lower_bound(first, second, delta=0.99).epsilon == 0.0
    at_half = epsilon_lower_bound(first, second, delta=0.5).epsilon
    assert 0.0 < at_half < epsilon_lower_bound(first, second, delta=0.0).epsilon


# --- views, directions, events ----------------------------------------------------------------


def two_views(seed: int, leak_first: bool) -> tuple[Runs, Runs]:
    """A view of pure noise (same distribution on both) and a view with randomized response
    at epsilon 3; ``leak_first`` puts the leaking view first in each mapping."""
    rng = np.random.default_rng(seed)
    samples: list[Runs] = []
    for value in (0, 1):
        noise = rng.integers(0, 20, size=RUNS).tolist()
        leak = randomized_response(3.0, value, RUNS, rng).tolist()
        views = ("leak", "noise") if leak_first else ("noise", "leak")
        outputs = {"leak": leak, "noise": noise}
        samples.append(
            [
                dict(zip(views, pair, strict=True))
                for pair in zip(outputs[views[0]], outputs[views[1]], strict=True)
            ]
        )
    return samples[0], samples[1]


@pytest.mark.parametrize("leak_first", [True, False])
def test_the_bound_comes_from_the_view_that_leaks(leak_first: bool) -> None:
    for seed in range(5):
        result = epsilon_lower_bound(*two_views(5000 + seed, leak_first), delta=DELTA)
        assert result.view == "leak"
        assert result.epsilon > 2.0


def test_a_leak_only_d_prime_shows_is_found_in_that_direction() -> None:
    """D' sometimes outputs 'extra', which D never does: the event holds 'extra', the
    direction is D' over D, and p_first/p_second stay D's and D''s frequencies."""
    rng = np.random.default_rng(6000)
    first = rng.choice(["x", "y"], size=RUNS).tolist()
    second = rng.choice(["x", "y", "extra"], p=[0.35, 0.35, 0.3], size=RUNS).tolist()
    result = epsilon_lower_bound(as_runs("out", first), as_runs("out", second), delta=DELTA)
    assert result.direction == BACKWARD
    assert result.event == "{'extra'}"
    assert result.p_first == 0.0 and result.p_second == pytest.approx(0.3, abs=0.04)
    assert result.epsilon > 4.0
    swapped = epsilon_lower_bound(as_runs("out", second), as_runs("out", first), delta=DELTA)
    assert (swapped.direction, swapped.epsilon) == (FORWARD, result.epsilon)


def test_a_large_event_is_described_by_a_few_keys_and_its_size() -> None:
    """Outputs rounded to 0.1, shifted on D: the event holds dozens of keys."""
    rng = np.random.default_rng(7000)
    first = np.round(rng.normal(1.0, 1.0, RUNS), 1).tolist()
    second = np.round(rng.normal(0.0, 1.0, RUNS), 1).tolist()
    result = epsilon_lower_bound(as_runs("out", first), as_runs("out", second), delta=DELTA)
    assert result.event.startswith("{") and result.event.endswith(" keys)}")
    assert result.event.count(",") == 3
    assert result.epsilon > 0.5


def test_keys_that_never_repeat_show_nothing() -> None:
    """Unrounded continuous outputs: no key chosen on the selection part comes back on the
    test part, so the bound is 0 however far apart the outputs are (module docstring: a view
    must make outputs repeat)."""
    rng = np.random.default_rng(7001)
    first, second = rng.normal(5.0, 1.0, RUNS).tolist(), rng.normal(0.0, 1.0, RUNS).tolist()
    result = epsilon_lower_bound(as_runs("out", first), as_runs("out", second), delta=DELTA)
    assert (result.epsilon, result.p_first, result.p_second) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("first", "second", "kwargs", "message"),
    [
        ([{"a": 1}] * 10, [{"a": 1}] * 9, {}, "as many runs"),
        ([{"a": 1}] * 10, [{"a": 1}] * 9 + [{"b": 1}], {}, "run 9 on D'"),
        ([{}] * 10, [{}] * 10, {}, "at least one view"),
        ([{"a": 1}] * 10, [{"a": 1}] * 10, {"select_fraction": 1.0}, "select_fraction"),
        ([{"a": 1}] * 3, [{"a": 1}] * 3, {"select_fraction": 0.2}, "no selection"),
        ([{"a": 1}] * 10, [{"a": 1}] * 10, {"alpha": 0.0}, "alpha"),
    ],
)
def test_inputs_the_guarantee_does_not_cover_are_refused(
    first: Runs, second: Runs, kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        epsilon_lower_bound(first, second, delta=DELTA, **kwargs)


# --- what a run count can show ----------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 8.0])
def test_required_runs_is_the_fewest_whose_ceiling_exceeds_epsilon(epsilon: float) -> None:
    runs = required_runs(epsilon, delta=DELTA)
    assert epsilon_ceiling(runs, delta=DELTA) > epsilon
    assert runs == 2 or epsilon_ceiling(runs - 1, delta=DELTA) <= epsilon
