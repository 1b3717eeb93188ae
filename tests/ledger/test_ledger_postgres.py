"""The ledger on a real PostgreSQL: atomic admission under concurrency, and its totals."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from app.db.models import Budget, Dataset, LedgerEntry, Tenant, new_id
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting
from app.privacy.params import TangParams
from app.privacy.synthesis import SynthesisPrivacy
from tests.filter_budget import budget_for_exactly, filter_spend, smallest_budget

SIZES = {"a": 400, "b": 300}
SHOTS = {"a": 1, "b": 1}
DELTA = 1e-5


def job_event():
    plan = SynthesisPrivacy(params=TangParams(sigma=2.0), M=10, N=2, tmax=5)
    event = plan.synthesis_event(SIZES, SHOTS)
    return event, plan.accountant.dataset_epsilon(event, DELTA)


def make_dataset(url: str, budget_epsilon: float | None) -> str:
    with session_scope(url) as session:
        tenant = Tenant(name=f"t-{new_id()}")
        session.add(tenant)
        session.flush()
        dataset = Dataset(
            tenant_id=tenant.id, name="d", task={}, label_counts=SIZES, record_count=700
        )
        session.add(dataset)
        session.flush()
        if budget_epsilon is not None:
            session.add(
                Budget(
                    dataset_id=dataset.id,
                    epsilon=budget_epsilon,
                    delta=DELTA,
                    accounting=Accounting.TIGHT.value,
                )
            )
        return dataset.id


def concurrent_admissions(
    url: str, dataset_id: str, event, epsilon: float, n: int, prefix: str = "job"
) -> list[bool]:
    """``n`` threads admit one job each at the same moment; which of them were admitted."""
    barrier = threading.Barrier(n)

    def submit(i: int) -> bool:
        barrier.wait()
        try:
            with session_scope(url) as session:
                ledger.admit(
                    session,
                    dataset_id=dataset_id,
                    job_id=f"{prefix}{i:02d}",
                    event=event,
                    epsilon=epsilon,
                    delta=DELTA,
                    accounting=Accounting.TIGHT,
                )
            return True
        except ledger.BudgetExceededError:
            return False

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(submit, range(n)))


def test_fifty_concurrent_submissions_admit_exactly_ten(postgres_url):
    event, epsilon = job_event()
    budget_epsilon = budget_for_exactly(Accounting.TIGHT, DELTA, event, 10)
    ten = filter_spend(Accounting.TIGHT, budget_epsilon, DELTA, [event] * 10)
    dataset_id = make_dataset(postgres_url, budget_epsilon=budget_epsilon)
    admitted = concurrent_admissions(postgres_url, dataset_id, event, epsilon, 50)
    assert sum(admitted) == 10

    with session_scope(postgres_url) as session:
        rows = session.scalars(
            select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)
        ).all()
        assert len(rows) == 10 and all(r.kind == "reserve" for r in rows)
        assert sorted(r.job_id for r in rows) == sorted(
            f"job{i:02d}" for i, ok in enumerate(admitted) if ok
        )
        budget = session.get(Budget, dataset_id)
        spent = ledger.spend(session, budget)
        assert spent.jobs == 10
        assert spent.epsilon == pytest.approx(ten)
        assert spent.plain_sum == pytest.approx(10 * epsilon)
        assert spent.epsilon < spent.plain_sum  # the filter is tighter than the sum
        assert spent.composed < spent.epsilon  # and dearer than composing (not valid)


def test_release_frees_budget_and_commit_is_idempotent(postgres_url):
    event, epsilon = job_event()
    alone = smallest_budget(Accounting.TIGHT, DELTA, [event])  # one job: the one-batch rule
    dataset_id = make_dataset(postgres_url, budget_epsilon=alone * 1.01)
    kwargs = dict(event=event, epsilon=epsilon, delta=DELTA, accounting=Accounting.TIGHT)
    with session_scope(postgres_url) as session:
        ledger.admit(session, dataset_id=dataset_id, job_id="first", **kwargs)
    with (
        pytest.raises(ledger.BudgetExceededError) as exceeded,
        session_scope(postgres_url) as session,
    ):
        ledger.admit(session, dataset_id=dataset_id, job_id="second", **kwargs)
    assert exceeded.value.remaining == pytest.approx(alone * 0.01, rel=1e-3)
    with session_scope(postgres_url) as session:
        ledger.release(session, "first")
    with session_scope(postgres_url) as session:
        ledger.admit(session, dataset_id=dataset_id, job_id="second", **kwargs)
    with session_scope(postgres_url) as session:
        ledger.commit(session, "second")
        ledger.commit(session, "second")  # a redelivered task: no second entry
        with pytest.raises(ledger.LedgerError, match="already committed"):
            ledger.release(session, "second")
    with session_scope(postgres_url) as session:
        kinds = [e.kind for e in ledger.history(session, dataset_id)]
        assert kinds == ["reserve", "release", "reserve", "commit"]
        count = session.scalar(
            select(func.count()).select_from(LedgerEntry).where(LedgerEntry.job_id == "second")
        )
        assert count == 2


def test_admission_needs_a_budget_and_the_same_accounting(postgres_url):
    event, epsilon = job_event()
    no_budget = make_dataset(postgres_url, budget_epsilon=None)
    kwargs = dict(event=event, epsilon=epsilon, delta=DELTA)
    with pytest.raises(ledger.NoBudgetError), session_scope(postgres_url) as session:
        ledger.admit(
            session, dataset_id=no_budget, job_id="x", accounting=Accounting.TIGHT, **kwargs
        )
    with_budget = make_dataset(postgres_url, budget_epsilon=100.0)
    with (
        pytest.raises(ledger.LedgerError, match="tight accounting"),
        session_scope(postgres_url) as session,
    ):
        ledger.admit(
            session, dataset_id=with_budget, job_id="y", accounting=Accounting.PAPER, **kwargs
        )
