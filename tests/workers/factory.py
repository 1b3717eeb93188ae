"""Database rows for worker tests: a tenant, a TREC-like dataset, a budget, the dataset's
count release and admitted jobs (token-loop jobs, and PromptPATE jobs on a public dataset of
the same tenant).

Records are unique words (``secret_<label>_<i>``) so a test can check that none of them
reaches a log, an error or anything else but the model's prompts.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
from sqlalchemy import select

from app.db import record_keys
from app.db.models import (
    Budget,
    CountReleaseRow,
    Dataset,
    DatasetKind,
    DatasetRecord,
    Job,
    LedgerEntry,
    PromptSet,
    Tenant,
    new_id,
)
from app.db.session import session_scope
from app.ledger import ledger
from app.methods.registry import Counts, MethodKind, get_method
from app.methods.token_loop import TokenLoopMethodPlan
from app.pate.config import PateConfig
from app.privacy.accounting import Accounting
from app.privacy.events import to_dict
from app.privacy.unit import (
    COUNT_RELEASE_SHARE,
    CountRelease,
    counts_digest,
    release_counts,
    release_share,
)
from app.services.count_releases import as_release, current_release
from app.services.jobs import job_record
from app.synthesis.config import SynthesisConfig
from app.synthesis.generator import SynthesisPlan, plan_synthesis
from app.synthesis.tasks import BUILTIN_TASKS

TREC = BUILTIN_TASKS["trec"]
PER_LABEL = 30
BUDGET_DELTA = 0.01
SECRET = "secret_"
PUBLIC_TEXTS = 40
# A PromptPATE job small enough for the fake backend: 6 teachers, groups of 8 public inputs.
PATE = {"teachers": 6, "queries": 20, "candidates": 2, "group_size": 8, "student_shots": 2}


@lru_cache
def noisy_counts(budget: float = 100.0) -> CountRelease:
    """The counts every test dataset's release holds: a Gaussian release of 6 x 30 at the
    service's share of the budget, drawn once from a seeded generator (the service draws
    each dataset's from the secure one), so that every test dataset's jobs plan alike and
    the plans (seconds of calibration and planning) are computed once."""
    epsilon, delta = release_share(budget, BUDGET_DELTA, COUNT_RELEASE_SHARE)
    sizes = {label: PER_LABEL for label in TREC.labels}
    return release_counts(sizes, epsilon, delta, np.random.default_rng(0))


@lru_cache
def _planned(epsilon: float, accounting: Accounting) -> SynthesisPlan:
    config = SynthesisConfig.for_task(
        "trec",
        epsilon=epsilon,
        accounting=accounting,
        shots=2,
        M=4,
        N=2,
        tmax=4,
        K=10,
        min_words=1,  # the fake model's one-word demonstrations are served (and compared)
    )
    return plan_synthesis(TREC, noisy_counts().estimates(), config)


def planned(
    epsilon: float = 8.0, accounting: Accounting = Accounting.TIGHT, release_id: str = ""
) -> SynthesisPlan:
    """A small token-loop plan from the datasets' count release (``release_id``: the
    dataset's row of it), as admission plans it: what ``plan_synthesis`` returns for that
    release (planning is deterministic given the release, issue 41)."""
    return dataclasses.replace(_planned(epsilon, accounting), release_id=release_id)


@lru_cache
def planned_epsilon(epsilon: float = 8.0, accounting: Accounting = Accounting.TIGHT) -> float:
    return planned(epsilon, accounting).epsilon()


def make_dataset(url: str, *, budget: float = 100.0) -> str:
    """A tenant with a TREC dataset of 6 x 30 records, a budget and the dataset's count
    release, charged on its ledger as the service charges it; returns the dataset ID."""
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
        rows = [(f"{SECRET}{label}_{i}", label) for label in TREC.labels for i in range(PER_LABEL)]
        _add_sealed(session, dataset.id, rows)
        row = Budget(
            dataset_id=dataset.id,
            epsilon=budget,
            delta=BUDGET_DELTA,
            accounting=Accounting.TIGHT.value,
        )
        session.add(row)
        session.flush()
        release = noisy_counts(budget)
        stored = CountReleaseRow(
            id=new_id(),
            dataset_id=dataset.id,
            digest=counts_digest(dataset.label_counts, dataset.record_count),
            sigma=release.sigma,
            noisy=dict(release.noisy),
            epsilon=release.epsilon,
            delta=release.delta,
        )
        ledger.charge_count_release(
            session,
            budget=row,
            release_id=stored.id,
            event={**to_dict(release.event()), "sigma": release.sigma, "count_release": stored.id},
            epsilon=release.epsilon,
            delta=release.delta,
        )
        session.add(stored)
        return dataset.id


def dataset_release(url: str, dataset_id: str) -> CountRelease:
    """The dataset's count release, as a plan reads it (``Counts.released``)."""
    with session_scope(url) as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        row = current_release(session, dataset)
        assert row is not None
        return as_release(row)


def make_job(url: str, dataset_id: str) -> str:
    """Admit a job the way the API does: planned from the dataset's count release, job row
    and reservation in one transaction."""
    release = dataset_release(url, dataset_id)
    assert release.estimates() == noisy_counts().estimates()  # what planned() planned from
    plan, epsilon = planned(release_id=release.id), planned_epsilon()
    with session_scope(url) as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        job = Job(
            tenant_id=dataset.tenant_id,
            dataset_id=dataset_id,
            method=plan.config.method.value,
            # What admission stores (the method's own ``stored()``: the release's estimates the
            # plan was priced with and the release's ID; no exact count, issue 41).
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
        _add_sealed(session, public.id, [(f"public_{i} what is it", "") for i in range(n)])
        return public.id


def make_pate_job(url: str, dataset_id: str, public_id: str, **overrides: object) -> str:
    """Admit a PromptPATE job as the API does (the service's job row, the ledger's admit)."""
    config = PateConfig(epsilon=4.0, delta=0.01, **{**PATE, **overrides})
    method = get_method(MethodKind.PROMPTPATE)
    assert not method.reads_counts  # the service gives its plan no private counts
    plan = method.plan(TREC, config, Counts(None, PUBLIC_TEXTS))
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


def _add_sealed(session, dataset_id: str, rows: list[tuple[str, str]]) -> None:
    """Records as an upload stores them: sealed under the dataset's data key (migration 0022)."""
    sealed = record_keys.current().seal_records(dataset_id, rows)
    session.add_all(DatasetRecord(dataset_id=dataset_id, sealed=value) for value in sealed)
