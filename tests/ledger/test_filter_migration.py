"""Ledgers written before the filter (issue 51, item 5), on SQLite and PostgreSQL.

A ledger admitted by the old rule (the tight composition of every live job within the
budget) is written at migration 0018, with the budget set just above that composition. After
the upgrade to head its rows read as they were (each job a batch of one: ``batch_id`` NULL),
the spend is recomputed under the filter and is now over the budget, the budget view says
why, the stored prompt is still served, and no new job is admitted."""

from __future__ import annotations

import json

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from app.api.schemas import BudgetPublic
from app.db.migrate import alembic_config
from app.db.models import Budget, LedgerEntry, PromptSet
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting, TightPldAccountant
from app.privacy.events import (
    GaussianEvent,
    LabelEvent,
    SampledEvent,
    SynthesisEvent,
    to_dict,
)
from app.privacy.filter import Rule
from app.privacy.sampling import PoissonSampling
from app.services.budgets import budget_view
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = "2026-01-01 00:00:00"
DELTA = 1e-6


def _job(sigma: float) -> SynthesisEvent:
    rounds = SampledEvent(PoissonSampling(rate=0.05, groups=10), (GaussianEvent(sigma),), 90)
    return SynthesisEvent((LabelEvent("a", rounds),))


JOBS = [_job(1.4), _job(1.6), _job(2.0), _job(1.4)]


def _write_old_ledger(url: str, budget_epsilon: float) -> None:
    """Tenant, dataset, budget, four reserved-and-committed jobs and a prompt, as the code
    of migration 0018 wrote them (plain SQL: the models are the new ones)."""
    engine = create_engine(url)
    false = False
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"),
                {"now": NOW},
            )
            conn.execute(
                text(
                    "INSERT INTO datasets (id, tenant_id, name, task, label_counts, "
                    "record_count, created_at) VALUES ('d', 't', 'd', :task, :counts, 400, :now)"
                ),
                {"task": "{}", "counts": json.dumps({"a": 400}), "now": NOW},
            )
            conn.execute(
                text(
                    "INSERT INTO budgets (dataset_id, epsilon, delta, accounting, updated_at) "
                    "VALUES ('d', :eps, :delta, 'tight', :now)"
                ),
                {"eps": budget_epsilon, "delta": DELTA, "now": NOW},
            )
            for index, event in enumerate(JOBS):
                for kind in ("reserve", "commit"):
                    conn.execute(
                        text(
                            "INSERT INTO ledger (dataset_id, job_id, kind, epsilon, delta, "
                            "event, created_at) VALUES ('d', :job, :kind, 1.0, :delta, :event, "
                            ":now)"
                        ),
                        {
                            "job": f"job{index}",
                            "kind": kind,
                            "delta": DELTA,
                            "event": json.dumps(to_dict(event)),
                            "now": NOW,
                        },
                    )
            conn.execute(
                text(
                    "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, "
                    "event, epsilon, delta, status, progress_done, progress_total, "
                    "touched_data, cancel_requested, attempts, created_at) VALUES ('job0', "
                    "'t', 'd', 'tang', '{}', '[]', '{}', 1.0, :delta, 'succeeded', 1, 1, "
                    ":true, :false, 1, :now)"
                ),
                {"delta": DELTA, "now": NOW, "true": True, "false": false},
            )
            conn.execute(
                text(
                    "INSERT INTO prompt_sets (id, tenant_id, job_id, dataset_id, task, "
                    "demonstrations, prompt, method, model, epsilon, delta, created_at) VALUES "
                    "('p', 't', 'job0', 'd', '{}', '[]', 'Q: x A: y', 'tang', 'm', 1.0, :delta, "
                    ":now)"
                ),
                {"delta": DELTA, "now": NOW},
            )
    finally:
        engine.dispose()


def test_an_old_ledger_reads_over_budget_under_the_filter_and_admits_nothing(
    empty_url: str,  # noqa: F811
) -> None:
    composed = TightPldAccountant(cached=False).dataset_epsilon(JOBS, DELTA)
    budget_epsilon = composed * 1.01  # the old rule admitted all four jobs
    config = alembic_config(empty_url)
    command.upgrade(config, "0018")
    _write_old_ledger(empty_url, budget_epsilon)
    command.upgrade(config, "head")

    with session_scope(empty_url) as session:
        entries = session.query(LedgerEntry).order_by(LedgerEntry.id).all()
        assert [e.batch_id for e in entries] == [None] * 8
        assert [e.batch_of for e in entries if e.kind == "reserve"] == [f"job{i}" for i in range(4)]
        budget = session.get(Budget, "d")
        spent = ledger.spend(session, budget)
        assert spent.composed == pytest.approx(composed, rel=1e-9)  # what it was admitted by
        assert spent.rule is Rule.RENYI_FILTER
        assert spent.epsilon > budget_epsilon  # over under the filter
        view = budget_view(session, tenant_id="t", dataset_id="d")
        assert view.level.value == "over"
        public = BudgetPublic.from_view(view)
        assert public.over_note is not None and "over budget" in public.over_note
        assert public.rule is Rule.RENYI_FILTER
        assert len(public.history) == 8
        # Nothing served is withdrawn: the prompt is still stored, whole.
        assert session.get(PromptSet, "p").prompt == "Q: x A: y"
        # No new job is admitted beyond the budget, however small.
        with pytest.raises(ledger.BudgetExceededError) as refused:
            ledger.admit(
                session,
                dataset_id="d",
                job_id="new",
                event=_job(50.0),
                epsilon=0.01,
                delta=DELTA,
                accounting=Accounting.TIGHT,
            )
        assert refused.value.remaining == 0.0
