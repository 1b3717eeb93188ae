"""The spend over time (the dashboard's chart) and the quote of one more job: both priced by
the budget's accountant, cross-checked against composing the live events directly."""

from __future__ import annotations

import pytest

from app.db.models import Budget
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting, accountant_for
from tests.filter_budget import filter_spend
from tests.ledger.test_ledger_postgres import DELTA, job_event, make_dataset


def test_the_timeline_follows_reserve_commit_and_release(sqlite_url):
    event, epsilon = job_event()
    dataset_id = make_dataset(sqlite_url, budget_epsilon=epsilon * 10)
    kwargs = dict(event=event, epsilon=epsilon, delta=DELTA, accounting=Accounting.TIGHT)
    accountant = accountant_for(Accounting.TIGHT)

    def composed(n: int) -> float:
        return accountant.dataset_epsilon([event] * n, DELTA) if n else 0.0

    def priced(n: int) -> float:
        """The filter's price of n jobs submitted one by one on this budget."""
        return filter_spend(Accounting.TIGHT, epsilon * 10, DELTA, [event] * n) if n else 0.0

    with session_scope(sqlite_url) as session:
        budget = session.get(Budget, dataset_id)
        assert ledger.timeline(session, budget) == []
        quote = ledger.spend_with(session, budget, event, epsilon)
        assert quote.epsilon == pytest.approx(priced(1)) and quote.jobs == 1
        for job_id in ("a", "b", "c"):
            ledger.admit(session, dataset_id=dataset_id, job_id=job_id, **kwargs)
        ledger.commit(session, "a")
        ledger.release(session, "b")
        quote = ledger.spend_with(session, budget, event, epsilon)
        points = ledger.timeline(session, budget)
        spend = ledger.spend(session, budget)

    assert [p.entry.kind for p in points] == ["reserve"] * 3 + ["commit", "release"]
    live = [1, 2, 3, 3, 2]  # jobs counted after each entry
    assert [p.epsilon for p in points] == pytest.approx([priced(n) for n in live])
    assert [p.rule for p in points] == ["one_batch"] + ["renyi_filter"] * 4
    assert [p.plain_sum for p in points] == pytest.approx([n * epsilon for n in live])
    assert points[-1].epsilon == pytest.approx(spend.epsilon)
    assert points[-1].plain_sum == pytest.approx(spend.plain_sum)
    assert composed(2) < priced(2)  # the filter: above composing (which is not valid)
    assert quote.epsilon == pytest.approx(priced(3)) and quote.jobs == 3
    assert quote.plain_sum == pytest.approx(3 * epsilon)


def test_a_long_ledger_composes_an_even_subset_including_the_last(sqlite_url):
    event, epsilon = job_event()
    dataset_id = make_dataset(sqlite_url, budget_epsilon=epsilon * 100)
    kwargs = dict(event=event, epsilon=epsilon, delta=DELTA, accounting=Accounting.TIGHT)
    with session_scope(sqlite_url) as session:
        budget = session.get(Budget, dataset_id)
        for i in range(9):
            ledger.admit(session, dataset_id=dataset_id, job_id=f"j{i}", **kwargs)
            ledger.commit(session, f"j{i}")
        points = ledger.timeline(session, budget, max_compositions=4)
        spend = ledger.spend(session, budget)
    assert len(points) == 18 and all(p.plain_sum > 0 for p in points)
    known = [(i, p.epsilon) for i, p in enumerate(points) if p.epsilon is not None]
    # Changes 1, 4 (rounded from 3.67), 6 (6.33) and 9; each reserve's commit repeats it.
    assert [i for i, _ in known] == [0, 1, 6, 7, 10, 11, 16, 17]
    for i, value in known:
        jobs = i // 2 + 1
        assert value == pytest.approx(
            filter_spend(Accounting.TIGHT, epsilon * 100, DELTA, [event] * jobs)
        )
    assert points[-1].epsilon == pytest.approx(spend.epsilon)
