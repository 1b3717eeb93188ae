"""Database rows for worker tests: a tenant, a TREC-like dataset, a budget and admitted jobs
(token-loop jobs, and PromptPATE jobs on a public dataset of the same tenant).

Records are unique words (``secret_<label>_<i>``) so a test can check that none of them
reaches a log, an error or anything else but the model's prompts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from sqlalchemy import select

from app.db.models import (
    Budget,
    Dataset,
    DatasetKind,
    DatasetRecord,
    Job,
    LedgerEntry,
    PromptSet,
    Tenant,
)
from app.db.session import session_scope
from app.ledger import ledger
from app.methods.registry import Counts, MethodKind, get_method
from app.methods.token_loop import TokenLoopMethodPlan
from app.pate.config import PateConfig
from app.privacy.accounting import Accounting
from app.privacy.events import to_dict
from app.services.jobs import job_record
from app.synthesis.config import SynthesisConfig
from app.synthesis.generator import SynthesisPlan, plan_synthesis
from app.synthesis.tasks import BUILTIN_TASKS

TREC = BUILTIN_TASKS["trec"]
PER_LABEL = 30
SECRET = "secret_"
PUBLIC_TEXTS = 40
# A PromptPATE job small enough for the fake backend: 6 teachers, groups of 8 public inputs.
PATE = {"teachers": 6, "queries": 20, "candidates": 2, "group_size": 8, "student_shots": 2}


@lru_cache
def planned(epsilon: float = 8.0, accounting: Accounting = Accounting.TIGHT) -> SynthesisPlan:
    """A small token-loop plan (calibration takes about a second, so plans are shared)."""
    config = SynthesisConfig.for_task(
        "trec", epsilon=epsilon, accounting=accounting, shots=2, M=4, N=2, tmax=4, K=10
    )
    sizes = {label: PER_LABEL for label in TREC.labels}
    return plan_synthesis(TREC, sizes, config, np.random.default_rng(0))


@lru_cache
def planned_epsilon(epsilon: float = 8.0, accounting: Accounting = Accounting.TIGHT) -> float:
    return planned(epsilon, accounting).epsilon()


def make_dataset(url: str, *, budget: float = 100.0) -> str:
    """A tenant with a TREC dataset of 6 x 30 records and a budget; returns the dataset ID."""
    with session_scope(url) as session:
        tenant = Tenant(name=f"tenant-{np.random.default_rng().integers(1 << 40)}")
        session.add(tenant)
        session.flush()
        dataset = Dataset(
            tenant_id=tenant.id,
            name="trec",
            task=TREC.model_dump(mode="json"),
            label_counts={label: PER_LABEL for label in TREC.labels},
            record_count=PER_LABEL * len(TREC.labels),
        )
        session.add(dataset)
        session.flush()
        session.add_all(
            DatasetRecord(dataset_id=dataset.id, text=f"{SECRET}{label}_{i}", label=label)
            for label in TREC.labels
            for i in range(PER_LABEL)
        )
        session.add(
            Budget(
                dataset_id=dataset.id,
                epsilon=budget,
                delta=0.01,
                accounting=Accounting.TIGHT.value,
            )
        )
        return dataset.id


def make_job(url: str, dataset_id: str) -> str:
    """Admit a job the way the API does: job row and reservation in one transaction."""
    plan, epsilon = planned(), planned_epsilon()
    with session_scope(url) as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        job = Job(
            tenant_id=dataset.tenant_id,
            dataset_id=dataset_id,
            method=plan.config.method.value,
            # What admission stores (the method's own ``stored()``: the exact sizes, and the
            # released ones the plan was priced with, issue 32).
            config=dict(TokenLoopMethodPlan(plan).stored().config),
            schedule=list(plan.schedule),
            event=to_dict(plan.event()),
            epsilon=epsilon,
            delta=plan.delta,
        )
        session.add(job)
        session.flush()
        ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id=job.id,
            event=plan.event(),
            epsilon=epsilon,
            delta=plan.delta,
            accounting=plan.config.accounting,
        )
        return job.id


def make_public_dataset(url: str, dataset_id: str, n: int = PUBLIC_TEXTS) -> str:
    """A public dataset of ``n`` texts for the tenant of ``dataset_id``; returns its ID."""
    with session_scope(url) as session:
        private = session.get(Dataset, dataset_id)
        assert private is not None
        public = Dataset(
            tenant_id=private.tenant_id,
            name="public",
            kind=DatasetKind.PUBLIC.value,
            task={},
            label_counts={},
            record_count=n,
        )
        session.add(public)
        session.flush()
        session.add_all(
            DatasetRecord(dataset_id=public.id, text=f"public_{i} what is it", label="")
            for i in range(n)
        )
        return public.id


def make_pate_job(url: str, dataset_id: str, public_id: str, **overrides: object) -> str:
    """Admit a PromptPATE job as the API does (the service's job row, the ledger's admit)."""
    config = PateConfig(epsilon=4.0, delta=0.01, **{**PATE, **overrides})
    n_private = PER_LABEL * len(TREC.labels)
    method = get_method(MethodKind.PROMPTPATE)
    plan = method.plan(TREC, config, Counts({}, n_private, PUBLIC_TEXTS))
    with session_scope(url) as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        job = job_record(dataset.tenant_id, dataset_id, method, plan, public_id)
        session.add(job)
        session.flush()
        ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id=job.id,
            event=plan.event(),
            epsilon=job.epsilon,
            delta=job.delta,
            accounting=config.accounting,
        )
        return job.id


def get_job(url: str, job_id: str) -> Job:
    with session_scope(url) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def update_job(url: str, job_id: str, **values: object) -> None:
    with session_scope(url) as session:
        job = session.get(Job, job_id)
        assert job is not None
        for key, value in values.items():
            setattr(job, key, value)


def ledger_kinds(url: str, job_id: str) -> list[str]:
    with session_scope(url) as session:
        return list(
            session.scalars(
                select(LedgerEntry.kind)
                .where(LedgerEntry.job_id == job_id)
                .order_by(LedgerEntry.id)
            )
        )


def prompt_sets(url: str, job_id: str) -> list[PromptSet]:
    with session_scope(url) as session:
        return list(session.scalars(select(PromptSet).where(PromptSet.job_id == job_id)))
