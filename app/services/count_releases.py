"""A dataset's one release of its label counts: drawn when a plan first needs it, charged
once, stored, and read by every later quote, plan, refusal and job of the dataset.

Why once per dataset (``app.privacy.unit``): a release drawn per plan would be a release per
quote, per refusal, per cancelled job, none of them charged, and averaging them would undo
the noise. Here a plan of a dataset whose counts are not declared public reads
:func:`dataset_counts`, which returns the stored release of the dataset's current records,
or draws it first: under the dataset's row lock and its budget's (the order admission takes
them), with the secure generator, at the service's share of the budget
(``DPSYN_COUNT_RELEASE_SHARE``), charged as a ledger entry of its own (kind ``counts``) and
committed before any plan reads it. Records that change (a new version, named by the digest
of their exact counts) get a new release, charged again.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Budget, CountReleaseRow, Dataset, new_id
from app.ledger import ledger
from app.ledger.owners import budget_owner_id
from app.methods.base import Counts, Method
from app.privacy.display import epsilon_text
from app.privacy.events import to_dict
from app.privacy.rng import make_rng
from app.privacy.unit import (
    COUNT_RELEASE_SHARE,
    CountRelease,
    counts_digest,
    release_counts,
    release_share,
)

from .errors import ConflictError


def release_share_setting() -> float:
    """The share of a budget a count release costs: the service's setting."""
    from app.settings import get_settings  # the settings read the environment once

    try:
        return get_settings().count_release_share
    except Exception:  # settings that do not validate are reported where they are used
        return COUNT_RELEASE_SHARE


def as_release(row: CountReleaseRow) -> CountRelease:
    """The stored release as the privacy code reads it."""
    return CountRelease(
        sigma=row.sigma,
        noisy={str(k): float(v) for k, v in row.noisy.items()},
        epsilon=row.epsilon,
        delta=row.delta,
        id=row.id,
    )


def current_release(session: Session, dataset: Dataset) -> CountReleaseRow | None:
    """The release of the dataset's current records, if one was drawn."""
    digest = counts_digest(dataset.label_counts or {}, dataset.record_count)
    return session.scalars(
        select(CountReleaseRow).where(
            CountReleaseRow.dataset_id == dataset.id, CountReleaseRow.digest == digest
        )
    ).one_or_none()


def dataset_releases(session: Session, dataset_id: str) -> list[CountReleaseRow]:
    """Every release of the dataset, oldest first (one per version of its records)."""
    return list(
        session.scalars(
            select(CountReleaseRow)
            .where(CountReleaseRow.dataset_id == dataset_id)
            .order_by(CountReleaseRow.created_at, CountReleaseRow.id)
        )
    )


def dataset_counts(
    session: Session, dataset: Dataset, method: Method, public_records: int = 0
) -> Counts:
    """What a plan of ``method`` on ``dataset`` may read: the counts declared public, none
    (a method that plans without them), or the dataset's count release (drawn and charged
    first if there is none for its current records). The session's transaction is
    committed if a release is drawn."""
    if dataset.counts_public:
        labels = {str(k): int(v) for k, v in (dataset.label_counts or {}).items()}
        return Counts.declared(labels, public_records)
    if not method.reads_counts:
        return Counts(None, public_records)
    row = current_release(session, dataset) or _draw(session, dataset)
    return Counts.released(as_release(row), public_records)


def _draw(session: Session, dataset: Dataset) -> CountReleaseRow:
    """Draw, store and charge the release of the dataset's current records, unless another
    process did meanwhile (checked again under the locks); commits."""
    session.rollback()  # end the read: the locks are taken in a fresh transaction
    locked = session.scalars(
        select(Dataset).where(Dataset.id == dataset.id).with_for_update()
    ).one()
    try:
        budget = ledger.lock_budget(session, locked.id)
    except ledger.NoBudgetError:
        session.rollback()
        raise _no_budget(budget_owner_id(session, locked.id)) from None
    row = current_release(session, locked)
    if row is not None:
        session.commit()
        return row
    row = _new_release(session, locked, budget)
    session.commit()
    return row


def _new_release(session: Session, dataset: Dataset, budget: Budget) -> CountReleaseRow:
    epsilon, delta = release_share(budget.epsilon, budget.delta, release_share_setting())
    sizes = {str(k): int(v) for k, v in (dataset.label_counts or {}).items()}
    release = release_counts(sizes, epsilon, delta, make_rng(), new_id())
    row = CountReleaseRow(
        id=release.id,
        dataset_id=dataset.id,
        digest=counts_digest(dataset.label_counts or {}, dataset.record_count),
        sigma=release.sigma,
        noisy=dict(release.noisy),
        epsilon=epsilon,
        delta=delta,
    )
    try:
        ledger.charge_count_release(
            session,
            budget=budget,
            release_id=release.id,
            event={**to_dict(release.event()), "sigma": release.sigma, "count_release": row.id},
            epsilon=epsilon,
            delta=delta,
            dataset_id=dataset.id,  # its own ID, on the budget it charges (maybe shared)
        )
    except ledger.LedgerHeldError as err:
        session.rollback()
        raise ConflictError(str(err), code="ledger_rolled_back") from None
    except ledger.BudgetExceededError as err:
        session.rollback()
        raise ConflictError(
            f"the dataset's label counts must be released before a job can be planned, and "
            f"the release ({release_share_setting():.0%} of the budget: epsilon "
            f"{epsilon_text(err.requested)}) does not fit: {epsilon_text(err.remaining)} of the "
            f"budget's epsilon {epsilon_text(err.total)} remain; raise the budget, or have the "
            "owner declare the "
            "counts public",
            code="budget_exceeded",
            remaining=err.remaining,
            spent=err.spent,
            total=err.total,
            requested=err.requested,
        ) from None
    session.add(row)
    return row


def _no_budget(dataset_id: str) -> ConflictError:
    return ConflictError(
        f"dataset {dataset_id!r} has no budget: set one with PUT /v1/datasets/{dataset_id}/budget",
        code="no_budget",
    )
