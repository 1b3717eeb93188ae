"""Empirical privacy audit of the Gaussian aggregation (Tang et al.) and of a whole AdaDPSyn
token step.

Worst-case neighbours: M one-hot distributions on token 0, and the same with one teacher
moved to token 1, so the two means are exactly the sensitivity sqrt(2)/M apart. We run the
real mechanism many times on each, choose a threshold test on one half of the runs, and on
the other half bound its error rates with Clopper-Pearson intervals. Any (epsilon, delta)-DP
mechanism satisfies FPR + e^eps FNR >= 1 - delta (and symmetrically), so
  eps_lb = log((1 - delta - FNR_upper) / FPR_upper)
is a lower bound on the true epsilon with probability >= 1 - 2 * ALPHA.

The pooled AdaDPSyn step (the default variant) is run through
:func:`~app.privacy.adadpsyn.pooled_aggregate_steps` on a stack of RUNS copies of the input:
the production code itself (a job's :func:`~app.privacy.adadpsyn.adadpsyn_aggregate` is that
function on a stack of one, draw for draw, which
``test_the_audited_pooled_stack_is_what_a_job_runs`` checks), whose steps only share the
vectorised arithmetic and draw their own noise, so the RUNS outputs are independent draws of
one step, as RUNS separate calls give (two-sample KS tests of 20,000 stacked against 20,000
separate steps, for both pooled parameter sets here and both inputs: p = 0.30-0.60). Same
RUNS, same tests, same bounds: 0.2 s per input instead of 27 s of Python loop.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from app.privacy.accounting import TightPldAccountant
from app.privacy.adadpsyn import adadpsyn_aggregate, pooled_aggregate_steps
from app.privacy.events import GaussianEvent, SampledEvent
from app.privacy.geometry import clipped_diameter
from app.privacy.mechanisms import GaussianMechanism
from app.privacy.params import AdaDPSynParams, AdaDPSynVariant, TangParams, adadpsyn_defaults
from app.privacy.rng import make_rng
from app.privacy.sampling import PoissonSampling
from app.privacy.tang import gaussian_aggregate, mean_mechanism

ALPHA = 1e-3  # per Clopper-Pearson bound
DELTA = 1e-5
M, K, RUNS = 10, 3, 40_000


def neighbouring_inputs() -> tuple[np.ndarray, np.ndarray]:
    base = np.zeros((M, K))
    base[:, 0] = 1.0
    neighbour = base.copy()
    neighbour[0] = [0.0, 1.0, 0.0]
    return base, neighbour


def statistic(outputs: np.ndarray) -> np.ndarray:
    """Projection on the direction in which the neighbour's mean moves."""
    return (outputs[:, 1] - outputs[:, 0]) / math.sqrt(2)


def epsilon_lower_bound(null: np.ndarray, alt: np.ndarray) -> float:
    """Threshold chosen on the first halves, error rates bounded on the second halves."""
    fit_null, test_null = null[: len(null) // 2], null[len(null) // 2 :]
    fit_alt, test_alt = alt[: len(alt) // 2], alt[len(alt) // 2 :]
    best, best_threshold = -math.inf, 0.0
    for threshold in np.quantile(fit_null, np.linspace(0.5, 0.9995, 200)):
        fpr = max(np.mean(fit_null > threshold), 1 / len(fit_null))
        fnr = np.mean(fit_alt <= threshold)
        if fnr < 1 - DELTA and math.log((1 - DELTA - fnr) / fpr) > best:
            best, best_threshold = math.log((1 - DELTA - fnr) / fpr), threshold
    n = len(test_null)
    false_pos = int(np.sum(test_null > best_threshold))
    false_neg = int(np.sum(test_alt <= best_threshold))
    fpr_upper = stats.beta.ppf(1 - ALPHA, false_pos + 1, n - false_pos)
    fnr_upper = stats.beta.ppf(1 - ALPHA, false_neg + 1, n - false_neg)
    return math.log(max(1 - DELTA - fnr_upper, 1e-300) / fpr_upper)


def accounted_epsilon(sigma: float) -> float:
    """What the tight accountant charges for one release (no subsampling)."""
    event = SampledEvent(PoissonSampling(rate=1.0, groups=M), (GaussianEvent(sigma),), 1)
    return TightPldAccountant().epsilon(event, DELTA)


def run(inputs: np.ndarray, aggregate, seed: int) -> np.ndarray:
    rng = make_rng(seed)
    return statistic(np.array([aggregate(inputs, rng) for _ in range(RUNS)]))


def run_step(
    inputs: np.ndarray, params: AdaDPSynParams, seed: int, direction: np.ndarray | None = None
) -> np.ndarray:
    """RUNS independent AdaDPSyn steps on ``inputs``: the pooled variant as one stack of
    RUNS steps (see the module docstring), the paper's one call at a time (it has no
    stacked form). ``direction``: project the outputs on it (default: :func:`statistic`)."""
    if params.variant is AdaDPSynVariant.POOLED:
        stack = np.repeat(inputs[None], RUNS, axis=0)
        outputs = pooled_aggregate_steps(stack, params, make_rng(seed)).distributions
        return statistic(outputs) if direction is None else outputs @ direction

    def aggregate(x, rng):
        return adadpsyn_aggregate(x, params, rng).distribution

    return run(inputs, aggregate, seed)


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_audit_lower_bound_never_exceeds_accounted_epsilon(sigma):
    base, neighbour = neighbouring_inputs()
    params = TangParams(sigma=sigma)

    def aggregate(x, rng):
        return gaussian_aggregate(x, params, rng).distribution

    lower = epsilon_lower_bound(run(base, aggregate, 1), run(neighbour, aggregate, 2))
    accounted = accounted_epsilon(sigma)
    assert lower <= accounted
    assert lower > 0.3 * accounted  # the audit has power: it is not vacuously low


def test_audit_catches_a_mechanism_that_adds_too_little_noise():
    """Negative control: noise at a quarter of the accounted std is flagged."""
    base, neighbour = neighbouring_inputs()
    sigma = 1.0
    weak = GaussianMechanism("weak", mean_mechanism(M, sigma).sensitivity, sigma / 4)

    def aggregate(x, rng):
        return weak.release(x.mean(axis=0), rng)

    lower = epsilon_lower_bound(run(base, aggregate, 3), run(neighbour, aggregate, 4))
    assert lower > accounted_epsilon(sigma)


# --- one whole AdaDPSyn token step ------------------------------------------------------------


def adadpsyn_step_epsilon(params: AdaDPSynParams) -> float:
    """What the tight accountant charges for one whole token step (no subsampling)."""
    event = SampledEvent(PoissonSampling(rate=1.0, groups=M), params.round_events(), 1)
    return TightPldAccountant().epsilon(event, DELTA)


def adadpsyn_variants(sigma1: float) -> list[AdaDPSynParams]:
    """The default (pooled) step and the paper's, with their constants for M."""
    return [
        AdaDPSynParams(sigma1=sigma1, **adadpsyn_defaults(M, variant))
        for variant in AdaDPSynVariant
    ]


@pytest.mark.parametrize("params", adadpsyn_variants(2.0), ids=lambda p: p.variant.value)
def test_audit_of_a_whole_adadpsyn_step_stays_below_its_charge(params):
    """GoodRadius (paper), coverage checks and every projected mean run on worst-case
    neighbours; only the released distribution is observed (as a client would see it)."""
    base, neighbour = neighbouring_inputs()
    lower = epsilon_lower_bound(run_step(base, params, 5), run_step(neighbour, params, 6))
    accounted = adadpsyn_step_epsilon(params)
    assert lower <= accounted
    assert lower > 0.15 * accounted  # the audit has power on the whole step too


def test_audit_flags_an_adadpsyn_step_whose_means_carry_too_little_noise():
    """Negative control: the step charged at sigma1 = 3 but run with 0.75 is flagged."""
    base, neighbour = neighbouring_inputs()
    charged = AdaDPSynParams(sigma1=3.0, **adadpsyn_defaults(M, AdaDPSynVariant.POOLED))
    weak = charged.with_free_multiplier(0.75)
    lower = epsilon_lower_bound(run_step(base, weak, 7), run_step(neighbour, weak, 8))
    assert lower > adadpsyn_step_epsilon(charged)


def test_the_audited_pooled_stack_is_what_a_job_runs():
    """A job's step (adadpsyn_aggregate) is the audited stack's code on a stack of one, draw
    for draw: a change to either that the other lacks fails here, not silently in the audit."""
    charged = AdaDPSynParams(sigma1=3.0, **adadpsyn_defaults(M, AdaDPSynVariant.POOLED))
    pooled = [p for p in adadpsyn_variants(2.0) if p.variant is AdaDPSynVariant.POOLED]
    for params in [*pooled, charged.with_free_multiplier(0.75)]:
        for inputs in neighbouring_inputs():
            for seed in range(50):
                job = adadpsyn_aggregate(inputs, params, make_rng(seed)).distribution
                stack = pooled_aggregate_steps(inputs[None], params, make_rng(seed))
                np.testing.assert_array_equal(job, stack.distributions[0])


# --- the clipped mean (issue 19) ----------------------------------------------------------


def clipped_step(sigma1: float) -> AdaDPSynParams:
    """A pooled step with no checks whose one mean clips the teachers to 0.4 from uniform."""
    return AdaDPSynParams(
        variant=AdaDPSynVariant.POOLED, good_radius=False, T=0, sigma1=sigma1, clip=CLIP
    )


CLIP = 0.4


def on_support(K: int, tokens: range, radius: float) -> np.ndarray:
    """A distribution over K tokens, zero outside ``tokens``, at L2 distance exactly
    ``radius`` from the uniform one: one token gets p, the others of the support share
    1 - p equally, p solving ||x||^2 = radius^2 + 1/K (so ||x - u|| = radius)."""
    s, target = len(tokens), radius**2 + 1.0 / K
    # p^2 + (1 - p)^2 / (s - 1) = target: a quadratic in p; the larger root keeps p >= 1/s.
    a, b, c = 1 + 1 / (s - 1), -2 / (s - 1), 1 / (s - 1) - target
    p = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    x = np.zeros(K)
    x[tokens.start] = p
    x[list(tokens)[1:]] = (1 - p) / (s - 1)
    assert x.min() >= 0 and abs(np.linalg.norm(x - 1 / K) - radius) < 1e-12
    return x


def clipped_neighbours(K: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The true worst case of the clipped mean (issue 32): all teachers on a distribution
    a, and one moved to b, where a and b have disjoint supports and sit at distance exactly
    the clip radius c from uniform. Clipping leaves both as they are, <a, b> = 0, so
    ||a - b||^2 = 2 c^2 + 2/K: the two means are exactly the stated sensitivity apart
    (:func:`clipped_diameter`). (Clipped one-hot teachers reach only 95% of it at K = 50.)
    Returns the two inputs and the unit direction in which the mean moves."""
    first, second = on_support(K, range(0, 6), CLIP), on_support(K, range(6, 12), CLIP)
    assert np.linalg.norm(first - second) == pytest.approx(clipped_diameter(CLIP, K), rel=1e-12)
    base = np.tile(first, (M, 1))
    neighbour = base.copy()
    neighbour[0] = second
    direction = (second - first) / np.linalg.norm(second - first)
    return base, neighbour, direction


def test_audit_of_the_clipped_mean_stays_below_its_charge():
    """The clipped mean is charged as Tang's mean at the same multiplier, its noise scaled
    to the clipped diameter; on its worst-case neighbours the audit stays below the charge
    and comes close to it."""
    params = clipped_step(1.0)
    base, neighbour, direction = clipped_neighbours()
    lower = epsilon_lower_bound(
        run_step(base, params, 9, direction), run_step(neighbour, params, 10, direction)
    )
    accounted = adadpsyn_step_epsilon(params)
    assert accounted == pytest.approx(accounted_epsilon(1.0))
    assert lower <= accounted
    assert lower > 0.3 * accounted


def test_audit_flags_a_clipped_mean_with_too_little_noise():
    """Negative control: charged at sigma1 = 1, run at 0.25."""
    base, neighbour, direction = clipped_neighbours()
    weak = clipped_step(0.25)
    lower = epsilon_lower_bound(
        run_step(base, weak, 11, direction), run_step(neighbour, weak, 12, direction)
    )
    assert lower > adadpsyn_step_epsilon(clipped_step(1.0))
