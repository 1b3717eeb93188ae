"""Jobs of linked datasets on one budget are priced as one group (a record's label may
differ between the two uploads), and one dataset's jobs keep their label groups."""

from __future__ import annotations

from app.privacy.accounting import TightPldAccountant
from app.privacy.events import GaussianEvent, LabelEvent, SampledEvent, SynthesisEvent
from app.privacy.filter import FilterParams, Item, price
from app.privacy.sampling import PoissonSampling


def _job(label: str) -> SynthesisEvent:
    rounds = SampledEvent(PoissonSampling(rate=0.1, groups=10), (GaussianEvent(1.5),), 30)
    return SynthesisEvent((LabelEvent(label, rounds),))


def test_jobs_of_two_datasets_on_one_budget_are_one_group() -> None:
    params, accountant = FilterParams.for_budget(10.0, 1e-6), TightPldAccountant()
    # One person's record: label a in the first upload, label b in the linked one.
    one = price(params, accountant, [Item(_job("a"), "j1", "d1"), Item(_job("b"), "j2", "d1")])
    linked = price(params, accountant, [Item(_job("a"), "j1", "d1"), Item(_job("b"), "j2", "d2")])
    both_on_one_record = price(
        params, accountant, [Item(_job("a"), "j1", "d1"), Item(_job("a"), "j2", "d1")]
    )
    assert [g.labels for g in one.groups] == [("a",), ("b",)]  # one dataset: apart
    assert [g.labels for g in linked.groups] == [()]  # linked: one group
    assert linked.epsilon == both_on_one_record.epsilon > one.epsilon
