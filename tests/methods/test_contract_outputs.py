"""The contract's clauses on what a method releases (issue 52), on the noisy-majority plug-in
(tests/methods/noisy_max.py): the honest method passes every clause, and each bug issue 52's
reviewer planted fails the clause that names it."""

from __future__ import annotations

import pytest

from app.contract import FailingBackend, MethodContract
from tests.methods.noisy_max import NOISY_MAJORITY, NoisyMajority


class TestNoisyMajority(MethodContract):
    method = NOISY_MAJORITY
    dp_stats = ("demonstrations",)

    def test_no_record_reaches_an_error(self) -> None:
        """It asks no model: a failing one changes nothing (the contract's clause skips)."""
        plan = self.plan()
        failing = FailingBackend(self.backend())
        assert plan.run(self.records(), failing, None) == plan.run(
            self.records(), self.backend(), None
        )


#: Each planted bug, and the clauses that must fail it.
CAUGHT_BY = {
    "one_event_many_releases": (
        "test_the_event_charges_what_ran",
        "test_the_outputs_show_no_more_than_add_or_remove_charges",
    ),
    "replace_one_sensitivity": ("test_the_outputs_show_no_more_than_replace_one_charges",),
    "count_in_text": ("test_no_record_or_count_in_any_output",),
    "record_as_demo": ("test_no_record_or_count_in_any_output",),
    "record_in_data_check": ("test_no_record_or_count_in_any_output",),
    "unseeded_shuffle": ("test_a_seeded_run_repeats",),
    "unseeded_noise": ("test_a_seeded_run_repeats",),
}


@pytest.mark.parametrize(("flaw", "clause"), [(f, c) for f, cs in CAUGHT_BY.items() for c in cs])
def test_each_planted_bug_fails_its_clause(flaw: str, clause: str) -> None:
    contract = type("Contract", (TestNoisyMajority,), {"method": NoisyMajority(flaw)})()
    with pytest.raises(AssertionError):
        getattr(contract, clause)()


@pytest.mark.parametrize("flaw", ["unseeded_shuffle", "unseeded_noise"])
def test_an_unseeded_draw_is_caught_every_time(flaw: str) -> None:
    """The reviewer's run caught these 22 and 21 times in 40; the clause must catch all 40."""
    contract = type("Contract", (TestNoisyMajority,), {"method": NoisyMajority(flaw)})()
    caught = 0
    for _ in range(40):
        try:
            contract.test_a_seeded_run_repeats()
        except AssertionError:
            caught += 1
    assert caught == 40


def test_the_honest_method_passes_every_clause_and_leaks_nothing_into_an_error() -> None:
    """The same records through the honest plug-in: what it says holds no record, so the
    outputs clause passes on every dataset it builds (a control for the planted leaks)."""
    contract = TestNoisyMajority()
    for name, records in contract.hard_datasets().items():
        said, _ = contract.everything_said(records)
        assert "a typical example of" in said, name
