"""The organisation view: every tenant's budgets, ledgers and job counts, read-only.

Only an ``org:read`` key reaches these functions (``GET /v1/budgets?all_tenants=true``, ``GET
/v1/fleet/ledgers.csv``, the dashboard's ``/ui/fleet``). What they return is what each tenant's
own budget views return -- budgets, composed spends, ledger entries (job IDs, epsilons, label
names), job counts and times -- plus the tenants' names; never a record, a prompt or a job's
parameters, so that an organisation can watch spending without reading any tenant's data.

A dataset's spend includes its count release (charged once for the dataset, a ledger
entry of kind ``counts``), whose part each row's spend states (``Spend.counts_epsilon``) and
whose entry is a row of its own in the ledgers' CSV. Its released values are never shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.db.models import Budget, Dataset, Job, JobStatus, Tenant
from app.ledger import ledger

from .budgets import DatasetSpend, SpendLevel, overview
from .errors import NotFoundError
from .ledger_csv import LedgerSection, ledgers_csv

_ALERTING = (SpendLevel.WARN, SpendLevel.OVER)


@dataclass(frozen=True)
class JobActivity:
    """A dataset's jobs at a glance: when the newest was submitted, and how many run or
    wait now."""

    last_job_at: datetime | None = None
    running: int = 0
    queued: int = 0


@dataclass(frozen=True)
class FleetRow:
    """One budgeted live dataset of one tenant, with its spend and job activity."""

    tenant: Tenant
    row: DatasetSpend
    jobs: JobActivity


def job_activity(session: Session, dataset_ids: Sequence[str]) -> dict[str, JobActivity]:
    """Each dataset's newest job time and running/queued counts, in one grouped query."""
    if not dataset_ids:
        return {}
    last: dict[str, datetime] = {}
    counts: dict[tuple[str, str], int] = {}
    rows = session.execute(
        select(Job.dataset_id, Job.status, func.count(), func.max(Job.created_at))
        .where(Job.dataset_id.in_(list(dataset_ids)))
        .group_by(Job.dataset_id, Job.status)
    )
    for dataset_id, status, count, newest in rows:
        counts[(dataset_id, status)] = int(count)
        if newest is not None and (dataset_id not in last or newest > last[dataset_id]):
            last[dataset_id] = newest
    return {
        dataset_id: JobActivity(
            last_job_at=last.get(dataset_id),
            running=counts.get((dataset_id, JobStatus.RUNNING.value), 0),
            queued=counts.get((dataset_id, JobStatus.QUEUED.value), 0),
        )
        for dataset_id in {d for d, _ in counts}
    }


def fleet(session: Session, *, over_threshold: bool = False) -> list[FleetRow]:
    """Every tenant's live budgeted datasets, by tenant name then newest dataset first;
    ``over_threshold``: only those at or past their warn threshold, fullest first (the alert
    route's answer across tenants). Disabled tenants are included: their budgets and ledgers
    stand whether or not their keys work."""
    rows: list[FleetRow] = []
    for tenant in session.scalars(select(Tenant).order_by(Tenant.name)):
        spends = [r for r in overview(session, tenant_id=tenant.id) if r.budget is not None]
        if over_threshold:
            spends = [r for r in spends if r.level in _ALERTING]
        activity = job_activity(session, [r.dataset.id for r in spends])
        rows += [FleetRow(tenant, r, activity.get(r.dataset.id, JobActivity())) for r in spends]
    if over_threshold:
        rows.sort(key=lambda f: -(f.row.fraction or 0.0))
    return rows


def fleet_ledgers(session: Session, tenant: str | None = None) -> str:
    """Every ledger of every tenant as one CSV (:func:`app.services.ledger_csv.ledgers_csv`):
    the tenant and dataset columns, then each dataset's ledger as its own CSV has it. Deleted
    datasets are included (a ledger outlives its records), by tenant name then dataset
    creation. ``tenant`` (a tenant's ID or name): that team's ledgers only, the export a
    privacy officer hands one team (404 if no tenant has it)."""
    query = (
        select(Budget, Dataset, Tenant)
        .join(Dataset, Dataset.id == Budget.dataset_id)
        .join(Tenant, Tenant.id == Dataset.tenant_id)
        .order_by(Tenant.name, Dataset.created_at, Dataset.id)
    )
    if tenant is not None:
        found = session.scalar(
            select(Tenant.id).where(or_(Tenant.id == tenant, Tenant.name == tenant))
        )
        if found is None:
            raise NotFoundError(f"tenant {tenant!r} not found")
        query = query.where(Tenant.id == found)
    budgets = session.execute(query)
    sections = [
        LedgerSection(
            tenant_id=tenant.id,
            tenant_name=tenant.name,
            dataset_id=dataset.id,
            dataset_name=dataset.name,
            points=ledger.timeline(session, budget),
        )
        for budget, dataset, tenant in budgets
    ]
    return ledgers_csv(sections)
