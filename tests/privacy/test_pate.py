"""Confident-GNMax, the Gaussian DP filter and the pricing of PromptPATE events.

Cross-checks: the paper accountant against dp_accounting's RDP accountant, the tight accountant
against the closed-form privacy curve of the Gaussian mechanism (Balle and Wang 2018), and a
planned job's charge against dp_accounting's PLD accountant composing every threshold check
and GNMax release separately (the data-independent bound of Confident-GNMax).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import norm

from app.privacy.accounting import (
    Accounting,
    PaperRdpAccountant,
    TightPldAccountant,
    UnsupportedEventError,
)
from app.privacy.calibration import CalibrationError
from app.privacy.events import (
    FixedSizeSampling,
    GaussianEvent,
    LabelEvent,
    PateEvent,
    PoissonSampling,
    SampledEvent,
    SynthesisEvent,
    from_dict,
    to_dict,
)
from app.privacy.mechanisms import Relation
from app.privacy.pate import ConfidentGnMax, GdpFilter, mu_for_epsilon, plan_pate_privacy
from app.privacy.rdp import ORDERS

ADD = Relation.ADD_OR_REMOVE.value
REPLACE = Relation.REPLACE_ONE.value


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of mu-GDP at delta: solve Phi(-e/mu + mu/2) - e^e Phi(-e/mu - mu/2) = delta."""

    def excess(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    lo, hi = 0.0, 1.0
    while excess(hi) > 0:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


# --- the aggregator ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relation", "d_threshold", "d_gnmax"),
    [(Relation.ADD_OR_REMOVE, 1.0, math.sqrt(2)), (Relation.REPLACE_ONE, 2.0, 2 * math.sqrt(2))],
)
def test_sensitivities_follow_the_relation(relation, d_threshold, d_gnmax):
    agg = ConfidentGnMax(threshold=50, sigma_threshold=40.0, sigma_gnmax=20.0, relation=relation)
    assert agg.threshold_mechanism.sensitivity == pytest.approx(d_threshold)
    assert agg.gnmax_mechanism.sensitivity == pytest.approx(d_gnmax)
    assert agg.threshold_mechanism.std == pytest.approx(40.0)  # the noise is given in votes
    assert agg.gnmax_mechanism.std == pytest.approx(20.0)
    assert agg.mu_threshold == pytest.approx(d_threshold / 40.0)
    assert agg.mu_gnmax == pytest.approx(d_gnmax / 20.0)
    assert agg.mu_query == pytest.approx(math.hypot(d_threshold / 40.0, d_gnmax / 20.0))


def test_confident_queries_pass_and_get_the_majority_label():
    rng = np.random.default_rng(0)
    agg = ConfidentGnMax(threshold=60, sigma_threshold=5.0, sigma_gnmax=3.0)
    votes = np.array([5, 90, 5])
    assert all(agg.passes(votes, rng) for _ in range(200))
    assert all(agg.label(votes, rng) == 1 for _ in range(200))


def test_unconfident_queries_are_rejected():
    rng = np.random.default_rng(1)
    agg = ConfidentGnMax(threshold=60, sigma_threshold=5.0, sigma_gnmax=3.0)
    votes = np.array([34, 33, 33])
    assert not any(agg.passes(votes, rng) for _ in range(200))


def test_gnmax_noise_does_flip_close_votes():
    rng = np.random.default_rng(2)
    agg = ConfidentGnMax(threshold=0, sigma_threshold=1.0, sigma_gnmax=30.0)
    labels = {agg.label(np.array([51, 49]), rng) for _ in range(200)}
    assert labels == {0, 1}


def test_aggregator_refuses_missing_noise():
    with pytest.raises(ValueError, match="positive"):
        ConfidentGnMax(threshold=1, sigma_threshold=0.0, sigma_gnmax=1.0)


# --- the filter ----------------------------------------------------------------------------


def test_filter_admits_until_the_sum_of_squares_reaches_the_budget():
    gdp = GdpFilter(budget_mu=1.0)
    admitted = 0
    while gdp.affords(0.3):
        gdp.spend(0.3)
        admitted += 1
    assert admitted == 11  # 11 * 0.09 = 0.99 <= 1 < 12 * 0.09
    assert gdp.spent_mu == pytest.approx(math.sqrt(0.99))
    with pytest.raises(ValueError, match="cannot afford"):
        gdp.spend(0.3)


def test_filter_checks_a_whole_query_before_it_runs():
    gdp = GdpFilter(budget_mu=0.5)
    gdp.spend(0.4)
    assert gdp.affords(0.1)
    assert not gdp.affords(0.1, 0.3)  # 0.16 + 0.01 + 0.09 > 0.25


# --- events and accountants ----------------------------------------------------------------


def test_pate_event_round_trips_and_validates():
    event = PateEvent(3.5, ADD)
    assert from_dict(to_dict(event)) == event
    with pytest.raises(ValueError, match="relation"):
        PateEvent(1.0, "swap")
    with pytest.raises(ValueError, match="noise_multiplier"):
        PateEvent(0.0, ADD)


@pytest.mark.parametrize("sigma", [0.5, 2.0, 10.0])
def test_paper_accountant_matches_dp_accounting_rdp(sigma):
    delta = 1e-5
    ours = PaperRdpAccountant().epsilon(PateEvent(sigma, REPLACE), delta)
    ref = rdp_privacy_accountant.RdpAccountant(
        orders=[float(a) for a in ORDERS],
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )
    ref.compose(dp_accounting.GaussianDpEvent(sigma))
    assert ours == pytest.approx(ref.get_epsilon(delta), rel=0.02)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 2.0])
def test_tight_accountant_matches_the_closed_form_gaussian(mu):
    delta = 1e-5
    ours = TightPldAccountant().epsilon(PateEvent(1.0 / mu, ADD), delta)
    exact = gaussian_epsilon(mu, delta)
    assert exact <= ours <= exact * 1.02 + 1e-3  # pessimistic discretisation, never below


def test_accountants_refuse_the_other_relation():
    with pytest.raises(UnsupportedEventError, match="replace_one"):
        TightPldAccountant().epsilon(PateEvent(1.0, REPLACE), 1e-5)
    with pytest.raises(UnsupportedEventError, match="add_or_remove"):
        PaperRdpAccountant().epsilon(PateEvent(1.0, ADD), 1e-5)


def _synthesis(sampling, labels=("a", "b")) -> SynthesisEvent:
    step = SampledEvent(sampling, (GaussianEvent(2.0),), steps=10)
    return SynthesisEvent(tuple(LabelEvent(label, step) for label in labels))


def test_a_pate_event_joins_every_exposure_group():
    tight = TightPldAccountant()
    pate = PateEvent(2.0, ADD)
    synth = _synthesis(PoissonSampling(rate=0.1, groups=5))
    groups = tight.exposures([synth, pate])
    # the job as its accountant prices it: one Gaussian of multiplier 1/mu (issue 35)
    gaussian = tight.resolve(pate)
    assert gaussian == GaussianEvent(2.0)
    assert len(groups) == 2 and all(gaussian in group for group in groups)
    assert tight.exposures([pate]) == [[gaussian]]
    paper = PaperRdpAccountant()
    fixed = _synthesis(FixedSizeSampling(population=100, groups=5, group_size=2), "abc")
    pairs = paper.exposures([fixed, PateEvent(2.0, REPLACE)])
    assert len(pairs) == 3 + 3 and all(GaussianEvent(2.0) in g for g in pairs)


def test_composition_with_synthesis_costs_more_than_either_job():
    tight = TightPldAccountant()
    delta = 1e-5
    pate = PateEvent(2.0, ADD)
    synth = _synthesis(PoissonSampling(rate=0.1, groups=5))
    alone = tight.dataset_epsilon(pate, delta)
    both = tight.dataset_epsilon([synth, pate], delta)
    assert both > max(alone, tight.dataset_epsilon(synth, delta))
    assert alone == pytest.approx(tight.epsilon(pate, delta))
    # two PromptPATE jobs compose like one Gaussian with the combined mu (GDP composition)
    two = tight.dataset_epsilon([pate, pate], delta)
    assert two == pytest.approx(gaussian_epsilon(math.sqrt(2) / 2.0, delta), rel=0.02)


# --- planning ------------------------------------------------------------------------------


@pytest.mark.parametrize("accounting", list(Accounting))
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 8.0])
def test_mu_for_epsilon_is_on_the_safe_side(accounting, epsilon):
    delta = 1e-5
    mu = mu_for_epsilon(epsilon, delta, accounting)
    relation = ADD if accounting is Accounting.TIGHT else REPLACE
    accountant = TightPldAccountant() if accounting is Accounting.TIGHT else PaperRdpAccountant()
    spent = accountant.epsilon(PateEvent(1.0 / mu, relation), delta)
    assert spent <= epsilon
    assert spent >= epsilon * 0.99
    if accounting is Accounting.TIGHT:
        assert gaussian_epsilon(mu, delta) <= epsilon


def test_mu_for_epsilon_refuses_bad_targets():
    with pytest.raises(CalibrationError, match="positive"):
        mu_for_epsilon(0.0, 1e-5, Accounting.TIGHT)
    with pytest.raises(CalibrationError, match="too small"):
        mu_for_epsilon(1e-9, 1e-5, Accounting.TIGHT)


@pytest.mark.parametrize("accounting", list(Accounting))
def test_planned_noise_lets_exactly_the_planned_answers_through(accounting):
    delta = 1e-4
    plan = plan_pate_privacy(
        epsilon=2.0, delta=delta, accounting=accounting, threshold=30, queries=50, n_public=300
    )
    agg = plan.aggregator
    assert agg.sigma_threshold == pytest.approx(2.0 * agg.sigma_gnmax)
    assert math.sqrt(50) * agg.mu_query == pytest.approx(plan.budget_mu, rel=1e-9)
    assert plan.epsilon(delta) <= 2.0
    gdp = GdpFilter(plan.budget_mu)
    answered = 0
    while gdp.affords(agg.mu_threshold, agg.mu_gnmax):
        gdp.spend(agg.mu_threshold)
        gdp.spend(agg.mu_gnmax)
        answered += 1
    assert answered in (49, 50)  # float rounding at the boundary
    # rejected queries cost only their check: many more fit
    gdp = GdpFilter(plan.budget_mu)
    checks = 0
    while gdp.affords(agg.mu_threshold, agg.mu_gnmax):
        gdp.spend(agg.mu_threshold)
        checks += 1
    assert checks > 5 * 50


def test_charge_is_capped_by_what_the_public_inputs_can_cost():
    plan = plan_pate_privacy(
        epsilon=2.0, delta=1e-4, accounting=Accounting.TIGHT, threshold=30, queries=50,
        n_public=300, sigma_threshold=400.0, sigma_gnmax=200.0,
    )  # fmt: skip
    worst = math.sqrt(300) * plan.aggregator.mu_query
    assert plan.budget_mu == pytest.approx(worst)
    assert plan.epsilon(1e-4) < 2.0
    assert plan.aggregator.sigma_gnmax == 200.0


def test_sigmas_come_both_or_neither():
    with pytest.raises(CalibrationError, match="both"):
        plan_pate_privacy(
            epsilon=1.0, delta=1e-5, accounting=Accounting.TIGHT, threshold=1, queries=1,
            n_public=1, sigma_gnmax=3.0,
        )  # fmt: skip


@pytest.mark.parametrize("accounting", list(Accounting))
def test_planned_charge_matches_dp_accounting_worst_case_composition(accounting):
    """Every planned query answered: the charge is the composition of all checks and releases,
    computed independently by dp_accounting's PLD accountant."""
    delta, queries = 1e-5, 40
    plan = plan_pate_privacy(
        epsilon=3.0, delta=delta, accounting=accounting, threshold=20, queries=queries,
        n_public=queries,
    )  # fmt: skip
    agg = plan.aggregator
    if accounting is Accounting.TIGHT:
        ref = pld_privacy_accountant.PLDAccountant(
            dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-3
        )
    else:  # dp_accounting's RDP accountant takes std / (replace-one sensitivity), like ours
        ref = rdp_privacy_accountant.RdpAccountant(
            orders=[float(a) for a in ORDERS],
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        )
    ref.compose(
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(agg.threshold_mechanism.noise_multiplier),
                    queries,
                ),
                dp_accounting.SelfComposedDpEvent(
                    dp_accounting.GaussianDpEvent(agg.gnmax_mechanism.noise_multiplier), queries
                ),
            ]
        )
    )
    assert plan.epsilon(delta) == pytest.approx(ref.get_epsilon(delta), rel=0.02)
