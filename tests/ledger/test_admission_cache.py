"""Admission with remembered compositions (issue 23): the tight composition the ledger
reports beside its filter's price (``Spend.composed``, and the one-batch rule's input) is,
after every reserve and release, exactly the composition of its live jobs recomputed from
scratch, and the filter's price is the same float an uncached accountant gives; a budget
between k and k + 1 jobs still admits exactly k, in sequence and (on PostgreSQL)
concurrently, on a ledger that already mixes synthesis and PromptPATE jobs."""

from __future__ import annotations

from sqlalchemy import select

from app.db.models import Budget, LedgerEntry, LedgerKind
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting, TightPldAccountant
from app.privacy.events import DATASET_EVENTS, DatasetEvent, PateEvent, from_dict, to_dict
from app.privacy.filter import FilterParams, Item, price
from tests.filter_budget import smallest_budget
from tests.ledger.test_ledger_postgres import (
    DELTA,
    concurrent_admissions,
    job_event,
    make_dataset,
)

PATE = PateEvent(noise_multiplier=4.0, relation="add_or_remove")
UNCACHED = TightPldAccountant(cached=False)


def recomposed(events: list[DatasetEvent]) -> float:
    """The composition as it was computed before the cache: every live job afresh."""
    return UNCACHED.dataset_epsilon(events, DELTA) if events else 0.0


def repriced(events: list[DatasetEvent], budget: float) -> float:
    """The filter's price of ``events`` (each its own batch) with an uncached accountant."""
    items = [Item(e, f"job{i}") for i, e in enumerate(events)]
    return price(FilterParams.for_budget(budget, DELTA), UNCACHED, items).epsilon


def live_events(session, dataset_id: str) -> list[DatasetEvent]:
    """The live jobs' events straight from the rows (no ledger helper, no memo)."""
    rows = session.scalars(
        select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)
    ).all()
    released = {r.job_id for r in rows if r.kind == LedgerKind.RELEASE}
    events = [
        from_dict(r.event)
        for r in rows
        if r.kind == LedgerKind.RESERVE and r.job_id not in released
    ]
    assert all(isinstance(e, DATASET_EVENTS) for e in events)
    return events  # type: ignore[return-value]


def test_spend_after_every_reserve_and_release_equals_recomposing(sqlite_url):
    synthesis, synthesis_epsilon = job_event()
    pate_epsilon = UNCACHED.dataset_epsilon(PATE, DELTA)
    dataset_id = make_dataset(sqlite_url, budget_epsilon=100.0)
    plan = [("s0", synthesis), ("p0", PATE), ("s1", synthesis), ("s2", synthesis)]
    plan += [("release", "s1"), ("s3", synthesis), ("p1", PATE), ("release", "p0")]
    plan += [("s4", synthesis)]
    with session_scope(sqlite_url) as session:
        budget = session.get(Budget, dataset_id)
        for job_id, what in plan:
            if job_id == "release":
                assert isinstance(what, str)
                ledger.release(session, what)
                session.flush()
            else:
                assert not isinstance(what, str)
                quote = ledger.spend_with(session, budget, what, 1.0)
                epsilon = pate_epsilon if what == PATE else synthesis_epsilon
                after = ledger.admit(
                    session,
                    dataset_id=dataset_id,
                    job_id=job_id,
                    event=what,
                    epsilon=epsilon,
                    delta=DELTA,
                    accounting=Accounting.TIGHT,
                )
                session.flush()
                assert after.epsilon == quote.epsilon  # the quote was the admission's price
                assert after.composed == recomposed(live_events(session, dataset_id))
            live = live_events(session, dataset_id)
            spent = ledger.spend(session, budget)
            assert spent.composed == recomposed(live)  # exact
            assert spent.epsilon == repriced(live, 100.0)
        points = ledger.timeline(session, budget)
    assert len(live) == 5  # s0, s2, s3, p1, s4
    assert points[-1].epsilon == repriced(live, 100.0)


def test_sequential_admissions_stop_exactly_where_recomposing_says(sqlite_url):
    synthesis, epsilon = job_event()
    base = [synthesis, PATE, synthesis]
    budget_epsilon = smallest_budget(Accounting.TIGHT, DELTA, [*base, *[synthesis] * 4]) * 1.00001
    seven = repriced([*base, *[synthesis] * 4], budget_epsilon)
    assert repriced([*base, *[synthesis] * 5], budget_epsilon) > budget_epsilon
    dataset_id = make_dataset(sqlite_url, budget_epsilon=budget_epsilon)
    admitted = 0
    with session_scope(sqlite_url) as session:
        for i, event in enumerate(base):
            kind_epsilon = UNCACHED.dataset_epsilon(event, DELTA)
            ledger.admit(
                session,
                dataset_id=dataset_id,
                job_id=f"base{i}",
                event=event,
                epsilon=kind_epsilon,
                delta=DELTA,
                accounting=Accounting.TIGHT,
            )
        for i in range(10):
            try:
                ledger.admit(
                    session,
                    dataset_id=dataset_id,
                    job_id=f"job{i}",
                    event=synthesis,
                    epsilon=epsilon,
                    delta=DELTA,
                    accounting=Accounting.TIGHT,
                )
                admitted += 1
            except ledger.BudgetExceededError as refused:
                assert refused.spent == seven
    assert admitted == 4


def test_concurrent_admissions_on_a_mixed_ledger_admit_exactly_n(postgres_url):
    synthesis, epsilon = job_event()
    base: list[DatasetEvent] = [synthesis, PATE, synthesis, PATE]
    budget_epsilon = smallest_budget(Accounting.TIGHT, DELTA, [*base, *[synthesis] * 6]) * 1.00001
    six = repriced([*base, *[synthesis] * 6], budget_epsilon)
    assert repriced([*base, *[synthesis] * 7], budget_epsilon) > budget_epsilon
    dataset_id = make_dataset(postgres_url, budget_epsilon=budget_epsilon)
    with session_scope(postgres_url) as session:
        for i, event in enumerate(base):
            ledger.admit(
                session,
                dataset_id=dataset_id,
                job_id=f"base{i}",
                event=event,
                epsilon=UNCACHED.dataset_epsilon(event, DELTA),
                delta=DELTA,
                accounting=Accounting.TIGHT,
            )
    admitted = concurrent_admissions(postgres_url, dataset_id, synthesis, epsilon, 30)
    assert sum(admitted) == 6
    with session_scope(postgres_url) as session:
        spent = ledger.spend(session, session.get(Budget, dataset_id))
        assert spent.jobs == 10
        assert spent.epsilon == repriced(live_events(session, dataset_id), budget_epsilon) == six
        assert spent.composed == recomposed(live_events(session, dataset_id))


def test_a_remembered_event_is_used_only_for_the_row_it_was_read_from():
    synthesis, _ = job_event()
    first = LedgerEntry(id=987_654_321, job_id="x", kind="reserve", event=to_dict(synthesis))
    assert ledger._stored_event(first) == synthesis
    assert ledger._stored_event(first) == synthesis  # remembered
    # The same ID naming another row (SQLite may reuse the ID of a rolled-back insert).
    reused = LedgerEntry(id=987_654_321, job_id="y", kind="reserve", event=to_dict(PATE))
    assert ledger._stored_event(reused) == PATE
