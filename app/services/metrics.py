"""Prometheus metrics, read from the database at scrape time.

The database is the source of truth (jobs run in other processes), so a custom collector
queries it on every scrape instead of counting in this process:

* ``dpsyn_jobs{status}`` -- jobs by status (gauge);
* ``dpsyn_tokens_generated_total`` -- token steps done by all token-loop jobs (sum of their
  progress; a PromptPATE job's progress counts public inputs, not tokens);
* ``dpsyn_ledger_epsilon_spent{tenant_id,dataset_id,accounting}`` -- composed epsilon of each
  budgeted dataset (``ledger.spend``), and ``dpsyn_budget_epsilon`` its total;
* ``dpsyn_budget_spent_fraction{tenant_id,dataset_id,accounting}`` -- the share of each
  budget spent (1.0: used up), and ``dpsyn_budget_warn_threshold`` the share at which the
  dashboard warns, so that an alert rule is ``fraction >= threshold``.

The per-dataset ones carry tenant and dataset IDs and spend, so they are only collected when
``per_dataset`` is true: the API does that only when a metrics token is configured and the
scraper sent it (``DPSYN_METRICS_TOKEN``); an open ``/metrics`` has the aggregates only.

Composing a dataset's events takes time, so each dataset's spend is cached until its ledger
or budget changes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import Budget, Dataset, Job, JobStatus, LedgerEntry
from app.ledger import ledger
from app.methods.registry import kinds_where
from app.services.budgets import spend_fraction


class DpsynCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session], *, per_dataset: bool = True) -> None:
        self._sessions = sessions
        self._per_dataset = per_dataset
        self._lock = threading.Lock()
        self._spend: dict[str, tuple[tuple[object, ...], float]] = {}

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("dpsyn_jobs", "Jobs by status.", labels=["status"])
        tokens = CounterMetricFamily(
            "dpsyn_tokens_generated",
            "Token steps done by all token-loop jobs (sum of their progress).",
        )
        labels = ["tenant_id", "dataset_id", "accounting"]
        spent = GaugeMetricFamily(
            "dpsyn_ledger_epsilon_spent",
            "Epsilon spent or reserved per dataset, composed by its budget's accountant.",
            labels=labels,
        )
        total = GaugeMetricFamily(
            "dpsyn_budget_epsilon", "Epsilon budget per dataset.", labels=labels
        )
        fraction = GaugeMetricFamily(
            "dpsyn_budget_spent_fraction",
            "Share of each dataset's epsilon budget spent or reserved (1.0: used up).",
            labels=labels,
        )
        threshold = GaugeMetricFamily(
            "dpsyn_budget_warn_threshold",
            "Share of each dataset's budget at which it is flagged (warn).",
            labels=labels,
        )
        with self._sessions() as session:
            rows = session.execute(select(Job.status, func.count()).group_by(Job.status))
            counts = {status: count for status, count in rows}
            for status in JobStatus:
                jobs.add_metric([status.value], float(counts.get(status.value, 0)))
            steps = select(func.sum(Job.progress_done)).where(
                Job.method.in_(kinds_where(lambda method: method.unit == "tokens"))
            )
            tokens.add_metric([], float(session.scalar(steps) or 0))
            budgets = self._budgets(session) if self._per_dataset else []
            for budget, tenant_id, last_entry in budgets:
                labels_of = [tenant_id, budget.dataset_id, budget.accounting]
                epsilon = self._spent(session, budget, last_entry)
                spent.add_metric(labels_of, epsilon)
                total.add_metric(labels_of, budget.epsilon)
                fraction.add_metric(labels_of, spend_fraction(epsilon, budget.epsilon))
                threshold.add_metric(labels_of, budget.warn_threshold)
            session.rollback()
        per_dataset = (spent, total, fraction, threshold) if self._per_dataset else ()
        yield from (jobs, tokens, *per_dataset)

    @staticmethod
    def _budgets(session: Session) -> list[tuple[Budget, str, int | None]]:
        # The newest entry on each budget: a dataset sharing another's budget (linked at
        # upload) writes entries under its own ID, which count for the owner's budget.
        owner = func.coalesce(Dataset.budget_dataset_id, LedgerEntry.dataset_id)
        last = (
            select(owner.label("dataset_id"), func.max(LedgerEntry.id).label("last"))
            .join(Dataset, Dataset.id == LedgerEntry.dataset_id)
            .group_by(owner)
            .subquery()
        )
        query = (
            select(Budget, Dataset.tenant_id, last.c.last)
            .join(Dataset, Dataset.id == Budget.dataset_id)
            .outerjoin(last, last.c.dataset_id == Budget.dataset_id)
            .order_by(Budget.dataset_id)
        )
        return [(budget, tenant, last_id) for budget, tenant, last_id in session.execute(query)]

    def _spent(self, session: Session, budget: Budget, last_entry: int | None) -> float:
        key = (last_entry, budget.epsilon, budget.delta, budget.accounting)
        with self._lock:
            cached = self._spend.get(budget.dataset_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        value = ledger.spend(session, budget).epsilon if last_entry is not None else 0.0
        with self._lock:
            self._spend[budget.dataset_id] = (key, value)
        return value


def make_registry(
    sessions: sessionmaker[Session], *, per_dataset: bool = True
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DpsynCollector(sessions, per_dataset=per_dataset))
    return registry
