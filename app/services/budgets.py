"""A dataset's privacy budget: setting it, and what has been spent against it.

The spend is the composition of the live events (reserved or committed, not released) by the
budget's accountant, at the budget's delta (``ledger.spend``); the plain sum of the jobs'
epsilons is reported beside it. The accounting mode cannot change once a job is charged
(its events were sampled for one accountant), and a budget cannot be lowered below what is
already spent. Public datasets (PromptPATE's unlabelled inputs) are never charged and take
no budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Budget, Dataset, DatasetKind, LedgerEntry, now
from app.ledger import ledger
from app.privacy.accounting import Accounting
from app.privacy.budget import EPSILON_RULE, fits_budget, is_epsilon

from .datasets import get_dataset, get_live_dataset, list_datasets
from .errors import ConflictError, InvalidError, NotFoundError


def default_delta(record_count: int) -> float:
    """The papers' convention, 1/|D| (kept below 1)."""
    return 1.0 / max(2, record_count)


@dataclass(frozen=True)
class BudgetView:
    dataset: Dataset
    budget: Budget
    spend: ledger.Spend
    history: list[LedgerEntry]

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget.epsilon - self.spend.epsilon)


def set_budget(
    session: Session,
    *,
    tenant_id: str,
    dataset_id: str,
    epsilon: float,
    delta: float | None,
    accounting: Accounting,
) -> Budget:
    """Create or change the dataset's budget; commits."""
    if not is_epsilon(epsilon):
        raise InvalidError(f"epsilon: {EPSILON_RULE}, got {epsilon}")
    dataset = get_live_dataset(session, tenant_id, dataset_id, lock=True)
    if dataset.kind == DatasetKind.PUBLIC:
        raise ConflictError(
            f"dataset {dataset_id!r} is public: its texts are never charged, so it takes no "
            "budget (set the budget on the private dataset a job synthesises from)",
            code="public_dataset",
        )
    if delta is None:
        delta = default_delta(dataset.record_count)
    if not 0 < delta < 1:
        raise InvalidError(f"delta: must be in (0, 1), got {delta}")
    accounting = Accounting(accounting)
    budget = session.scalars(
        select(Budget).where(Budget.dataset_id == dataset.id).with_for_update()
    ).one_or_none()
    if budget is None:
        budget = Budget(
            dataset_id=dataset.id, epsilon=epsilon, delta=delta, accounting=accounting.value
        )
        session.add(budget)
        session.commit()
        return budget
    current = ledger.spend(session, budget)
    if current.jobs and Accounting(budget.accounting) is not accounting:
        raise ConflictError(
            f"the budget's accounting is {budget.accounting} and {current.jobs} job(s) are "
            "charged under it; it cannot change",
            code="accounting_locked",
        )
    candidate = Budget(
        dataset_id=dataset.id, epsilon=epsilon, delta=delta, accounting=accounting.value
    )
    spent = ledger.spend(session, candidate) if current.jobs else current
    if not fits_budget(spent.epsilon, epsilon):
        raise ConflictError(
            f"epsilon {epsilon:g} is below what is already spent or reserved at delta "
            f"{delta:g} ({spent.epsilon:.4g})",
            code="budget_below_spent",
            spent=spent.epsilon,
        )
    budget.epsilon, budget.delta, budget.accounting = epsilon, delta, accounting.value
    budget.updated_at = now()
    session.commit()
    return budget


def budget_view(session: Session, *, tenant_id: str, dataset_id: str) -> BudgetView:
    """The budget, its spend and the ledger history (deleted datasets included: the ledger
    outlives the records)."""
    dataset = get_dataset(session, tenant_id, dataset_id)
    budget = session.get(Budget, dataset.id)
    if budget is None and dataset.kind == DatasetKind.PUBLIC:
        raise NotFoundError(
            f"dataset {dataset_id!r} is public: it is never charged and has no budget",
            code="no_budget",
        )
    if budget is None:
        raise NotFoundError(
            f"dataset {dataset_id!r} has no budget: set one with PUT "
            f"/v1/datasets/{dataset_id}/budget",
            code="no_budget",
        )
    return BudgetView(
        dataset=dataset,
        budget=budget,
        spend=ledger.spend(session, budget),
        history=ledger.history(session, dataset.id),
    )


@dataclass(frozen=True)
class DatasetSpend:
    """A dataset with its budget and spend (None for a public dataset, or before a budget is
    set): one row of the dashboard's overview."""

    dataset: Dataset
    budget: Budget | None
    spend: ledger.Spend | None

    @property
    def remaining(self) -> float | None:
        if self.budget is None or self.spend is None:
            return None
        return max(0.0, self.budget.epsilon - self.spend.epsilon)


def overview(session: Session, *, tenant_id: str, limit: int = 500) -> list[DatasetSpend]:
    """The tenant's live datasets, newest first, each with its budget and composed spend."""
    rows = []
    for dataset in list_datasets(session, tenant_id, include_deleted=False, limit=limit, offset=0):
        budget = session.get(Budget, dataset.id)
        spent = ledger.spend(session, budget) if budget is not None else None
        rows.append(DatasetSpend(dataset=dataset, budget=budget, spend=spent))
    return rows


def spend_timeline(
    session: Session, *, tenant_id: str, dataset_id: str
) -> tuple[BudgetView, list[ledger.SpendPoint]]:
    """:func:`budget_view` and the spend after each ledger entry (for a chart)."""
    view = budget_view(session, tenant_id=tenant_id, dataset_id=dataset_id)
    return view, ledger.timeline(session, view.budget)
