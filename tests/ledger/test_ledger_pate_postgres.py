"""PromptPATE events in the ledger on PostgreSQL: concurrent admission against one budget,
and a budget shared with token-loop jobs, priced by composition."""

from __future__ import annotations

import pytest

from app.db.models import Budget
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.events import PateEvent, from_dict
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
    five = accountant.dataset_epsilon([PATE] * 5, DELTA)
    six = accountant.dataset_epsilon([PATE] * 6, DELTA)
    assert five < six
    dataset_id = make_dataset(postgres_url, budget_epsilon=(five + six) / 2)
    admitted = concurrent_admissions(postgres_url, dataset_id, PATE, epsilon, 20, "pate")
    assert sum(admitted) == 5
    with session_scope(postgres_url) as session:
        spent = ledger.spend(session, session.get(Budget, dataset_id))
        history = ledger.history(session, dataset_id)
    assert spent.jobs == 5 and spent.epsilon == pytest.approx(five)
    assert all(from_dict(e.event) == PATE for e in history)


def test_a_budget_shared_by_both_kinds_of_job_is_their_composition(postgres_url):
    synthesis, synthesis_epsilon = job_event()
    accountant = accountant_for(Accounting.TIGHT)
    pate_epsilon = accountant.dataset_epsilon([PATE], DELTA)
    both = accountant.dataset_epsilon([synthesis, PATE], DELTA)
    assert max(synthesis_epsilon, pate_epsilon) < both
    dataset_id = make_dataset(postgres_url, budget_epsilon=both * 1.001)
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
    assert spent.epsilon == pytest.approx(pate_epsilon) and spent.jobs == 1
    assert kinds == [
        ("reserve", "synthesis"),
        ("reserve", "pate"),
        ("commit", "pate"),
        ("release", "synthesis"),
    ]
