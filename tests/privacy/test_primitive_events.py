"""Primitive events (issue 35, item 3): a mechanism kind defined here, outside app/privacy,
from primitives only, is priced by both accountants as dp_accounting prices it, with no
edit to app/privacy; and the three built-in job kinds are exactly their compositions."""

from __future__ import annotations

import math
import re

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from app.privacy.accounting import (
    Accounting,
    PaperRdpAccountant,
    TightPldAccountant,
    UnsupportedEventError,
    accountant_for,
)
from app.privacy.event_text import describe_event
from app.privacy.events import (
    RELATIONS,
    ComposedEvent,
    DpsgdEvent,
    GaussianEvent,
    LabelEvent,
    LaplaceEvent,
    NamedEvent,
    PartitionEvent,
    PateEvent,
    PoissonSampling,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
    SelfComposedEvent,
    Sensitivity,
    SynthesisEvent,
    event_parts,
    from_dict,
    noise_multipliers,
    to_dict,
)
from app.privacy.rdp import ORDERS
from app.privacy.sampling import FixedSizeSampling
from tests.privacy.test_golden_charges import golden

DELTA = 1e-5
ADD = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE


def gaussian_histogram(std: float, releases: int = 1) -> GaussianEvent:
    """A new mechanism kind, as a plug-in would define it: the Gaussian mechanism on the
    histogram of the dataset's labels, noise std ``std`` counts per bin. Sensitivity:
    adding or removing one record moves one bin by 1 (L2 1); replacing one moves two bins by
    1 each (L2 sqrt 2). Every record is read."""
    return GaussianEvent(std, releases, Sensitivity(add_or_remove=1.0, replace_one=math.sqrt(2)))


def pld_reference(event: dp_accounting.DpEvent) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(ADD, value_discretization_interval=1e-4)
    return accountant.compose(event).get_epsilon(DELTA)


def rdp_reference(event: dp_accounting.DpEvent, relation=REPLACE) -> float:
    orders = [float(a) for a in ORDERS]
    accountant = rdp_privacy_accountant.RdpAccountant(orders, neighboring_relation=relation)
    return accountant.compose(event).get_epsilon(DELTA)


@pytest.mark.parametrize("std", [0.8, 3.0, 20.0])
def test_a_gaussian_histogram_defined_outside_app_privacy_is_priced_like_dp_accounting(std):
    histogram = gaussian_histogram(std, releases=3)
    tight = TightPldAccountant(cached=False).dataset_epsilon(histogram, DELTA)
    want = pld_reference(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(std), 3))
    assert want <= tight * (1 + 1e-9) and tight == pytest.approx(want, rel=0.02, abs=2e-3)
    # replace-one: the multiplier relative to the sensitivity sqrt 2
    paper = PaperRdpAccountant().dataset_epsilon(histogram, DELTA)
    gaussian = dp_accounting.GaussianDpEvent(std / math.sqrt(2))
    assert paper == pytest.approx(
        rdp_reference(dp_accounting.SelfComposedDpEvent(gaussian, 3)), rel=1e-6
    )


@pytest.mark.parametrize("scale", [0.5, 2.0, 10.0])
def test_a_laplace_mechanism_is_priced_like_dp_accounting(scale):
    event = LaplaceEvent(scale, count=2)
    ref = dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(scale), 2)
    tight = TightPldAccountant(cached=False).epsilon(event, DELTA)
    assert pld_reference(ref) <= tight * (1 + 1e-9)
    assert tight == pytest.approx(pld_reference(ref), rel=0.02, abs=2e-3)
    assert PaperRdpAccountant().epsilon(event, DELTA) == pytest.approx(rdp_reference(ref), rel=1e-6)


def test_a_poisson_sampled_laplace_and_a_composition_are_priced_like_dp_accounting():
    sampled = SampledEvent(PoissonSampling(0.05, 1), (LaplaceEvent(1.5),), 40)
    mixed = ComposedEvent(
        (
            SelfComposedEvent(GaussianEvent(4.0), 5),
            SampledEvent(PoissonSampling(0.02, 1), (GaussianEvent(1.1),), 300),
            sampled,
        )
    )
    ref = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0), 5),
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.1)),
                300,
            ),
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.LaplaceDpEvent(1.5)), 40
            ),
        ]
    )
    ours = TightPldAccountant(cached=False).epsilon(mixed, DELTA)
    want = pld_reference(ref)
    assert want <= ours * (1 + 1e-9) and ours == pytest.approx(want, rel=0.03)
    # a composition nested in a self-composition is priced the same way
    nested = SelfComposedEvent(ComposedEvent((GaussianEvent(4.0), GaussianEvent(6.0))), 3)
    nested_ref = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(4.0), dp_accounting.GaussianDpEvent(6.0)]
        ),
        3,
    )
    assert PaperRdpAccountant().epsilon(nested, DELTA) == pytest.approx(
        rdp_reference(nested_ref), rel=1e-6
    )


def test_a_per_label_mechanism_joins_its_labels_group_only():
    """A new kind that reads one label's records (say, a noisy count of label "a") is charged
    to that label's group; a histogram of every record joins every group."""
    tight = TightPldAccountant(cached=False)
    rounds = SampledEvent(PoissonSampling(0.1, 5), (GaussianEvent(2.0),), 10)
    job_a = PartitionEvent("a", rounds)
    job_b = PartitionEvent("b", rounds)
    count_a = PartitionEvent("a", GaussianEvent(3.0))
    histogram = gaussian_histogram(5.0)
    groups = tight.exposures([ComposedEvent((job_a, job_b)), count_a, histogram])
    unit_histogram = GaussianEvent(5.0)
    assert groups == [[rounds, GaussianEvent(3.0), unit_histogram], [rounds, unit_histogram]]
    spend = tight.dataset_epsilon([ComposedEvent((job_a, job_b)), count_a, histogram], DELTA)
    assert spend == tight.epsilon([rounds, GaussianEvent(3.0), unit_histogram], DELTA)


def test_a_new_kind_round_trips_through_its_stored_form():
    event = ComposedEvent(
        (
            PartitionEvent("a", GaussianEvent(3.0)),
            gaussian_histogram(5.0, 2),
            SelfComposedEvent(SampledEvent(PoissonSampling(0.1, 1), (LaplaceEvent(2.0),), 4), 2),
        )
    )
    stored = to_dict(event)
    assert from_dict(stored) == event
    assert stored["events"][1]["sensitivity"] == {
        "add_or_remove": 1.0,
        "replace_one": math.sqrt(2),
    }
    assert to_dict(GaussianEvent(2.0)) == {"type": "gaussian", "noise_multiplier": 2.0, "count": 1}


def test_what_a_primitive_was_not_analysed_for_is_refused():
    only_add = GaussianEvent(2.0, 1, Sensitivity.only("add_or_remove"))
    assert TightPldAccountant().epsilon(only_add, DELTA) > 0
    with pytest.raises(UnsupportedEventError, match="add_or_remove neighbours only"):
        PaperRdpAccountant().epsilon(only_add, DELTA)
    from app.privacy.sampling import FixedSizeSampling

    fixed = SampledEvent(FixedSizeSampling(100, 1, 5), (LaplaceEvent(1.0),), 3)
    with pytest.raises(UnsupportedEventError, match="Laplace"):
        PaperRdpAccountant().epsilon(fixed, DELTA)
    with pytest.raises(UnsupportedEventError, match="PoissonSampling"):
        TightPldAccountant().epsilon(SelfComposedEvent(fixed, 2), DELTA)
    inside = SelfComposedEvent(PartitionEvent("a", GaussianEvent(1.0)), 2)
    with pytest.raises(UnsupportedEventError, match="partition"):
        TightPldAccountant().epsilon(inside, DELTA)
    with pytest.raises(ValueError, match="one Laplace"):
        SampledEvent(PoissonSampling(0.1, 1), (LaplaceEvent(1.0), GaussianEvent(1.0)), 1)


def test_no_noise_costs_everything_and_no_steps_nothing():
    for accountant in (TightPldAccountant(), PaperRdpAccountant()):
        assert accountant.epsilon(LaplaceEvent(0.0), DELTA) == math.inf
        assert accountant.epsilon(SelfComposedEvent(GaussianEvent(0.0), 0), DELTA) == 0.0
    idle = SampledEvent(PoissonSampling(0.1, 1), (GaussianEvent(0.0),), 0)
    assert TightPldAccountant().epsilon(SelfComposedEvent(idle, 3), DELTA) == 0.0


@pytest.mark.parametrize("name", sorted(golden()["jobs"]))
def test_each_stored_job_is_exactly_its_composition_of_primitives(name):
    """A row of today's form (the named event) and the same job written as primitives cost
    the same floats under both accountants: the named types add nothing to the pricing."""
    named = from_dict(golden()["jobs"][name]["event"])
    assert isinstance(named, NamedEvent)
    primitive = from_dict(to_dict(named.primitive()))  # the primitives' own stored form
    for accounting in Accounting:
        accountant = accountant_for(accounting)
        try:
            want = accountant.dataset_epsilon(named, DELTA)
        except UnsupportedEventError:
            with pytest.raises(UnsupportedEventError):
                accountant.dataset_epsilon(primitive, DELTA)
            continue
        assert accountant.dataset_epsilon(primitive, DELTA) == want


def test_a_promptpate_event_is_one_gaussian_of_one_relation():
    assert PateEvent(2.5, "replace_one").primitive() == GaussianEvent(
        2.5, 1, Sensitivity(add_or_remove=None, replace_one=1.0)
    )


def test_an_event_in_words_and_its_noise() -> None:
    """``dpsyn privacy quote`` shows any event in the primitives' notation, a named event as
    its primitives, one part a line, with each noise multiplier once in the order it runs."""
    rounds = SampledEvent(FixedSizeSampling(100, 2, 5), (GaussianEvent(1.5), GaussianEvent(3)), 4)
    part = PartitionEvent("a", ComposedEvent((LaplaceEvent(2.0, count=3), rounds)))
    added = GaussianEvent(1.5, sensitivity=Sensitivity.only("add_or_remove"))
    event = ComposedEvent((part, SelfComposedEvent(added, 2)))
    unit = "add/remove 1, replace-one 1"
    assert describe_event(part) == (
        f"PartitionEvent('a', ComposedEvent(LaplaceEvent(2, count=3; L1 sensitivity {unit}), "
        "SampledEvent(FixedSizeSampling(population=100, groups=2, group_size=5), "
        f"(GaussianEvent(1.5; L2 sensitivity {unit}), GaussianEvent(3; L2 sensitivity {unit})), "
        "steps=4; sampling analysed for replace-one only)))"
    )
    assert describe_event(event_parts(event)[1]) == (
        "SelfComposedEvent(GaussianEvent(1.5; L2 sensitivity add/remove 1, replace-one not "
        "analysed), count=2)"
    )
    assert noise_multipliers(event) == (2.0, 1.5, 3.0)
    pate = PateEvent(0.5, "replace_one")
    assert event_parts(pate) == (pate.primitive(),)
    assert describe_event(pate) == (
        "GaussianEvent(0.5; L2 sensitivity replace-one 1, add/remove not analysed)"
    )


def _kinds() -> dict[str, tuple[object, list[str]]]:
    """Each kind of event ``describe_event`` covers, with what its line must name: the
    sensitivity under each relation (or that a relation was not analysed), and the relation
    a sampling is analysed for."""
    poisson = PoissonSampling(0.1, 2)
    rounds = SampledEvent(poisson, (GaussianEvent(1.2),), 3)
    both = "add/remove 1, replace-one 1"
    return {
        "gaussian": (gaussian_histogram(5.0), ["L2 sensitivity add/remove 1, replace-one 1.414"]),
        "laplace": (LaplaceEvent(2.0), [f"L1 sensitivity {both}"]),
        "pure_dp": (
            PureDpEvent(0.5, 4, Sensitivity(add_or_remove=None, replace_one=2.0)),
            ["sensitivity replace-one 2, add/remove not analysed"],
        ),
        "randomized_response (whole dataset)": (
            RandomizedResponseEvent(0.2, 3, relations=RELATIONS),
            ["one bucket change under add/remove, replace-one"],
        ),
        "randomized_response (per record)": (
            RandomizedResponseEvent(0.2, 3, relations=("replace_one",)),
            ["one bucket change under replace-one, add/remove not analysed"],
        ),
        "sampled (poisson)": (rounds, [f"L2 sensitivity {both}", "analysed for add/remove only"]),
        "sampled (fixed size)": (
            SampledEvent(FixedSizeSampling(50, 2, 5), (LaplaceEvent(3.0),), 2),
            [f"L1 sensitivity {both}", "analysed for replace-one only"],
        ),
        "pate": (
            PateEvent(0.5, "add_or_remove"),
            ["L2 sensitivity add/remove 1, replace-one not analysed"],
        ),
        "dpsgd": (
            DpsgdEvent(1.1, PoissonSampling(0.01, 1), 100, GaussianEvent(20.0)),
            [
                f"GaussianEvent(20; L2 sensitivity {both})",  # the count release
                "L2 sensitivity add/remove 1, replace-one 2",  # CLIPPED_SUM
                "analysed for add/remove only",
            ],
        ),
        "token loop": (
            SynthesisEvent((LabelEvent("a", rounds, GaussianEvent(9.0)),)),
            [f"GaussianEvent(9; L2 sensitivity {both})", "analysed for add/remove only"],
        ),
        "composed": (
            SelfComposedEvent(ComposedEvent((LaplaceEvent(2.0), PureDpEvent(0.1))), 2),
            [f"L1 sensitivity {both}", f"PureDpEvent(0.1; sensitivity {both})"],
        ),
    }


@pytest.mark.parametrize("kind", list(_kinds()))
def test_each_event_kind_says_its_sensitivity_and_relations(kind: str) -> None:
    """``dpsyn privacy quote`` printed ``PureDpEvent(0.5, count=4)`` with no sensitivity
    (issue 52): every mechanism's line names its sensitivity under each relation, or that it
    was not analysed there, and every sampling the relation it is analysed for."""
    event, said = _kinds()[kind]
    line = describe_event(event)  # type: ignore[arg-type]
    for words in said:
        assert words in line, (kind, line)
    mechanisms = re.findall(r"\b(?:Gaussian|Laplace|PureDp|RandomizedResponse)Event\(", line)
    assert line.count("sensitivity") + line.count("bucket change") == len(mechanisms), line


def test_each_sampling_names_the_relation_of_the_accountant_that_requires_it() -> None:
    """The quote's "sampling analysed for" is the relation of the accountant whose sampling
    it is (not a second list to keep in step)."""
    for accountant in (TightPldAccountant(), PaperRdpAccountant()):
        assert accountant.sampling_type.relation == accountant.relation.value
