"""PromptPATE events in the ledger on PostgreSQL: concurrent admission against one budget,
and a budget shared with token-loop jobs, priced by composition."""

from __future__ import annotations

import pytest

from app.db.models import Budget
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.events import PateEvent, from_dict
from tests.filter_budget import budget_for_exactly, filter_spend, smallest_budget
from tests.ledger.test_ledger_postgres import (
    DELTA,
    concurrent_admissions,
    job_event,
    make_dataset,
)

PATE = PateEvent(noise_multiplier=2.0, relation="add_or_remove")  # a 0.5-GDP job


def test_concurrent_promptpate_admissions_stop_at_the_budget(postgres_url):
    accountant = accountant_for(Accounting.TIGHT)
    epsilon = accountant.dataset_epsilon([PATE], DELTA)
    budget_epsilon = budget_for_exactly(Accounting.TIGHT, DELTA, PATE, 5)
    five = filter_spend(Accounting.TIGHT, budget_epsilon, DELTA, [PATE] * 5)
    dataset_id = make_dataset(postgres_url, budget_epsilon=budget_epsilon)
    admitted = concurrent_admissions(postgres_url, dataset_id, PATE, epsilon, 20, "pate")
    assert sum(admitted) == 5
    with session_scope(postgres_url) as session:
        spent = ledger.spend(session, session.get(Budget, dataset_id))
        history = ledger.history(session, dataset_id)
    assert spent.jobs == 5 and spent.epsilon == pytest.approx(five)
    assert all(from_dict(e.event) == PATE for e in history)


def test_a_budget_shared_by_both_kinds_of_job_is_their_composition(postgres_url):
    """A token-loop job and a PromptPATE job, one after the other, priced together by the
    ledger's filter (their tight composition beside it)."""
    synthesis, synthesis_epsilon = job_event()
    accountant = accountant_for(Accounting.TIGHT)
    pate_epsilon = accountant.dataset_epsilon([PATE], DELTA)
    composed = accountant.dataset_epsilon([synthesis, PATE], DELTA)
    assert max(synthesis_epsilon, pate_epsilon) < composed
    budget_epsilon = smallest_budget(Accounting.TIGHT, DELTA, [synthesis, PATE]) * 1.001
    both = filter_spend(Accounting.TIGHT, budget_epsilon, DELTA, [synthesis, PATE])
    dataset_id = make_dataset(postgres_url, budget_epsilon=budget_epsilon)
    with session_scope(postgres_url) as session:
        ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id="tokens",
            event=synthesis,
            epsilon=synthesis_epsilon,
            delta=DELTA,
            accounting=Accounting.TIGHT,
        )
    with session_scope(postgres_url) as session:
        after = ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id="pate",
            event=PATE,
            epsilon=pate_epsilon,
            delta=DELTA,
            accounting=Accounting.TIGHT,
        )
    assert after.epsilon == pytest.approx(both)
    assert after.composed == pytest.approx(composed) and composed < both
    with (
        pytest.raises(ledger.BudgetExceededError),
        session_scope(postgres_url) as session,
    ):
        ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id="pate2",
            event=PATE,
            epsilon=pate_epsilon,
            delta=DELTA,
            accounting=Accounting.TIGHT,
        )
    with session_scope(postgres_url) as session:
        ledger.commit(session, "pate")
        ledger.release(session, "tokens")
    with session_scope(postgres_url) as session:
        spent = ledger.spend(session, session.get(Budget, dataset_id))
        kinds = [(e.kind, e.event["type"]) for e in ledger.history(session, dataset_id)]
    # the PromptPATE job alone: the one-batch rule, at half the delta
    alone = filter_spend(Accounting.TIGHT, budget_epsilon, DELTA, [PATE])
    assert spent.epsilon == pytest.approx(alone) and spent.jobs == 1
    assert spent.composed == pytest.approx(pate_epsilon) and pate_epsilon < alone
    assert kinds == [
        ("reserve", "synthesis"),
        ("reserve", "pate"),
        ("commit", "pate"),
        ("release", "synthesis"),
    ]
