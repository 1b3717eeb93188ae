"""Pure-DP and randomized-response primitives (issue 45): a plug-in's exponential mechanism,
report-noisy-max or sparse vector is described as ``PureDpEvent(epsilon, count)``, and
k-ary randomized response as ``RandomizedResponseEvent(p, k, count, relations=...)`` (the
relations its author analysed: required, issue 52), with no edit in ``app/privacy/``. Both
accountants price them exactly, checked against the closed form of the composition of
pure-DP mechanisms (computed here on its own) and against dp-accounting.

Before: the obvious stand-in, a Laplace release of the same epsilon, under-priced (20 at
epsilon 0.5: 9.671 against a worst case of 9.987 at delta 1e-6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from app.privacy.accounting import PaperRdpAccountant, TightPldAccountant
from app.privacy.composition import UnsupportedEventError
from app.privacy.event_text import describe_event
from app.privacy.events import (
    RELATIONS,
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    PartitionEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    Sensitivity,
    from_dict,
    to_dict,
)
from app.privacy.rdp import ORDERS, pure_dp_rdp, randomized_response_rdp

DELTA = 1e-6
REPLACE_ONE = privacy_accountant.NeighboringRelation.REPLACE_ONE
WHOLE_DATASET = RELATIONS  # randomized response of one query of all the records
PER_RECORD = ("replace_one",)  # each record's own response: replace-one only


def composed_delta(epsilon: float, count: int, target: float) -> float:
    """The exact delta at ``target`` of ``count`` epsilon-DP mechanisms composed (their
    worst case, Kairouz, Oh and Viswanath 2015): the loss is (count - 2l) epsilon when l of
    the count binary randomized responses flip, each with probability 1 / (1 + e^eps)."""
    flip = 1.0 / (1.0 + math.exp(epsilon))
    total = 0.0
    for flips in range(count + 1):
        loss = (count - 2 * flips) * epsilon
        if loss > target:
            weight = math.comb(count, flips) * (1 - flip) ** (count - flips) * flip**flips
            total += weight * -math.expm1(target - loss)
    return total


def composed_epsilon(epsilon: float, count: int, delta: float) -> float:
    """The smallest epsilon at which :func:`composed_delta` is at most ``delta`` (bisection)."""
    low, high = 0.0, count * epsilon
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (
            (middle, high) if composed_delta(epsilon, count, middle) > delta else (low, middle)
        )
    return high


@pytest.mark.parametrize(("epsilon", "count", "worst"), [(0.5, 20, 9.987), (0.1, 200, 7.186)])
def test_pure_dp_is_priced_at_its_exact_worst_case(epsilon: float, count: int, worst: float):
    exact = composed_epsilon(epsilon, count, DELTA)
    assert exact == pytest.approx(worst, abs=5e-4)  # the figures, derived here
    tight = TightPldAccountant().epsilon(PureDpEvent(epsilon, count), DELTA)
    assert exact <= tight <= exact * 1.002  # pessimistic discretisation, never below
    # RDP is an upper bound of the same curve: above, and not far at these counts
    paper = PaperRdpAccountant().epsilon(PureDpEvent(epsilon, count), DELTA)
    assert exact <= paper <= exact * 1.35


def test_a_laplace_stand_in_under_prices_the_worst_case():
    """Negative control: why the primitive exists (the issue's 9.671 against 9.987)."""
    laplace = TightPldAccountant().epsilon(LaplaceEvent(1 / 0.5, count=20), DELTA)
    assert laplace == pytest.approx(9.671, abs=5e-3)
    assert laplace < composed_epsilon(0.5, 20, DELTA) - 0.3


@pytest.mark.parametrize(("p", "k"), [(0.3, 2), (0.1, 5), (0.6, 14), (0.05, 3)])
def test_randomized_response_rdp_is_dp_accountings(p: float, k: int):
    reference = rdp_privacy_accountant.RdpAccountant(
        orders=[float(a) for a in ORDERS], neighboring_relation=REPLACE_ONE
    )
    reference.compose(dp_event.RandomizedResponseDpEvent(p, k), 7)
    ours = 7 * randomized_response_rdp(p, k, ORDERS)
    assert np.allclose(ours, reference._rdp, rtol=1e-9, atol=1e-12)
    rr = RandomizedResponseEvent(p, k, count=7, relations=PER_RECORD)
    priced = PaperRdpAccountant().epsilon(rr, DELTA)
    assert priced == pytest.approx(reference.get_epsilon(DELTA), rel=1e-3)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 2.0, 6.0])
def test_pure_dp_rdp_is_binary_randomized_response_at_epsilon(epsilon: float):
    reference = rdp_privacy_accountant.RdpAccountant(
        orders=[float(a) for a in ORDERS], neighboring_relation=REPLACE_ONE
    )
    reference.compose(dp_event.RandomizedResponseDpEvent(2 / (math.exp(epsilon) + 1), 2))
    assert np.allclose(pure_dp_rdp(epsilon, ORDERS), reference._rdp, rtol=1e-9)
    binary = RandomizedResponseEvent(2 / (math.exp(epsilon) + 1), 2, relations=WHOLE_DATASET)
    assert binary.epsilon == pytest.approx(epsilon)


@pytest.mark.parametrize(("p", "k", "count"), [(0.3, 2, 10), (0.1, 5, 3), (0.6, 14, 40)])
def test_randomized_response_pld_is_dp_accountings(p: float, k: int, count: int):
    reference = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=REPLACE_ONE, value_discretization_interval=2e-3
    )
    # one compose per release: this dp-accounting's PLD accountant drops ``count`` for a
    # randomized-response event (compose(event, 10) prices one release; checked here)
    for _ in range(count):
        reference.compose(dp_event.RandomizedResponseDpEvent(p, k))
    # a query of the whole dataset: priced under add/remove too, by the same curve
    ours = TightPldAccountant().epsilon(
        RandomizedResponseEvent(p, k, count, relations=WHOLE_DATASET), DELTA
    )
    assert ours == pytest.approx(reference.get_epsilon(DELTA), rel=2e-3)


def test_relations_and_group_privacy_are_as_stated():
    only_add_remove = PureDpEvent(0.3, 4, Sensitivity.only("add_or_remove"))
    TightPldAccountant().epsilon(only_add_remove, DELTA)  # priced
    with pytest.raises(UnsupportedEventError, match="not stated for replace_one"):
        PaperRdpAccountant().epsilon(only_add_remove, DELTA)
    twice = PureDpEvent(0.3, 4, Sensitivity(add_or_remove=1.0, replace_one=2.0))
    paper = PaperRdpAccountant()
    assert paper.epsilon(twice, DELTA) == pytest.approx(paper.epsilon(PureDpEvent(0.6, 4), DELTA))
    rr = RandomizedResponseEvent(0.2, 4, relations=PER_RECORD)
    with pytest.raises(UnsupportedEventError, match="randomized response"):
        TightPldAccountant().epsilon(rr, DELTA)
    exact = RandomizedResponseEvent(0.0, 3, relations=WHOLE_DATASET)
    assert exact.epsilon == math.inf
    assert TightPldAccountant().epsilon(exact, DELTA) == math.inf
    with pytest.raises(ValueError, match="epsilon must be finite"):
        PureDpEvent(math.inf)


def test_randomized_response_names_its_relations_as_dp_accounting_requires():
    """No default relation (issue 52): a per-record randomizer is replace-one only, which
    dp-accounting requires of every ``RandomizedResponseDpEvent`` (it refuses add/remove in
    both accountants); a query of the whole dataset names both, and the tight (add/remove)
    accountant prices it by the same two-bucket curve. A stored event keeps its relations,
    and one stored without them is refused rather than given a default."""
    with pytest.raises(TypeError, match="relations"):
        RandomizedResponseEvent(0.2, 4)  # type: ignore[call-arg]
    for accountant in (pld_privacy_accountant.PLDAccountant, rdp_privacy_accountant.RdpAccountant):
        add_remove = privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE
        assert not accountant(neighboring_relation=add_remove).supports(
            dp_event.RandomizedResponseDpEvent(0.2, 4)
        )
    per_record = RandomizedResponseEvent(0.2, 4, relations=PER_RECORD)
    with pytest.raises(UnsupportedEventError, match="analysed for replace_one neighbours only"):
        TightPldAccountant().epsilon(per_record, DELTA)
    whole = RandomizedResponseEvent(0.2, 4, relations=WHOLE_DATASET)
    assert TightPldAccountant().epsilon(whole, DELTA) == pytest.approx(
        PaperRdpAccountant().epsilon(per_record, DELTA), rel=0.05
    )
    for event in (per_record, whole):
        assert from_dict(to_dict(event)) == event
    stored = to_dict(per_record)
    del stored["relations"]
    with pytest.raises(ValueError, match="must name its relations"):
        from_dict(stored)


def test_they_compose_round_trip_and_read_in_a_dataset_event():
    """A plug-in's job: a noisy count, then 5 exponential-mechanism picks on one label
    partition; the ledger's per-record exposure prices them with everything else."""
    job = PartitionEvent(
        "billing",
        ComposedEvent(
            (
                GaussianEvent(4.0),
                PureDpEvent(0.2, 5),
                RandomizedResponseEvent(0.5, 3, relations=WHOLE_DATASET),
            )
        ),
    )
    assert from_dict(to_dict(job)) == job
    assert describe_event(job) == (
        "PartitionEvent('billing', ComposedEvent(GaussianEvent(4; L2 sensitivity add/remove 1, "
        "replace-one 1), PureDpEvent(0.2, count=5; sensitivity add/remove 1, replace-one 1), "
        "RandomizedResponseEvent(0.5, num_buckets=3; one bucket change under add/remove, "
        "replace-one)))"
    )
    tight = TightPldAccountant()
    alone = tight.epsilon(ComposedEvent((GaussianEvent(4.0),)), DELTA)
    assert tight.dataset_epsilon(job, DELTA) > alone + 0.5
