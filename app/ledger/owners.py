"""Whose budget a dataset charges: its own, or the budget of the dataset it was linked to at
upload (``datasets.budget_dataset_id``, docs/privacy.md "Budgets follow the records").

A link always names the root owner (never a chain), so one read resolves it. Every read or
lock of a dataset's budget or ledger by dataset ID goes through :func:`budget_owner_id`; the
ledger of a budget is the entries of its owner and of every dataset linked to it (each entry
keeps the dataset its job ran on)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.db.models import Budget, Dataset


def budget_owner_id(session: Session, dataset_id: str) -> str:
    """The ID of the dataset whose budget ``dataset_id`` charges: its link's owner, else
    itself (also for an ID that names no dataset, for the caller's own refusal)."""
    owner = session.scalar(select(Dataset.budget_dataset_id).where(Dataset.id == dataset_id))
    return owner or dataset_id


def budget_of(session: Session, dataset_id: str) -> Budget | None:
    """The budget ``dataset_id`` charges (its owner's), or None if none is set."""
    return session.get(Budget, budget_owner_id(session, dataset_id))


def members_clause(column: InstrumentedAttribute[str], owner_id: str) -> ColumnElement[bool]:
    """A condition on a dataset-ID ``column``: the owner's own dataset or one linked to it."""
    linked = select(Dataset.id).where(Dataset.budget_dataset_id == owner_id)
    return or_(column == owner_id, column.in_(linked))


def linked_datasets(session: Session, owner_id: str) -> list[str]:
    """The IDs of the datasets that charge ``owner_id``'s budget, oldest first."""
    return list(
        session.scalars(
            select(Dataset.id)
            .where(Dataset.budget_dataset_id == owner_id)
            .order_by(Dataset.created_at, Dataset.id)
        )
    )
