"""``run_job`` on a PromptDPSGD job whose worker has no local model: it fails before it
touches the data, with the backend named, and its reservation is released; the ledger
composes its DP-SGD event with the dataset's other jobs."""

from __future__ import annotations

from app.db.models import Dataset, JobStatus
from app.db.session import session_scope
from app.ledger import ledger
from app.llm.provider import StaticProvider
from app.methods.registry import Counts, MethodKind, get_method
from app.promptdpsgd.config import PromptDpsgdConfig
from app.services.jobs import job_record
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import (
    TREC,
    dataset_release,
    get_job,
    ledger_kinds,
    make_dataset,
    make_job,
)
from workers.runner import RetryPolicy, run_job


def make_dpsgd_job(url: str, dataset_id: str) -> str:
    """Admit a PromptDPSGD job as the API does (the service's job row, the ledger's admit)."""
    config = PromptDpsgdConfig(epsilon=2.0, delta=0.01, steps=3, batch_size=8)
    method = get_method(MethodKind.PROMPTDPSGD)
    release = dataset_release(url, dataset_id)  # the dataset's one release, as admission reads it
    plan = method.plan(TREC, config, Counts.released(release))
    with session_scope(url) as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        job = job_record(dataset.tenant_id, dataset_id, method, plan)
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


def test_a_backend_without_gradients_fails_the_job_uncharged(sqlite_url):
    dataset = make_dataset(sqlite_url)
    other = make_job(sqlite_url, dataset)  # a token-loop job on the same budget
    job_id = make_dpsgd_job(sqlite_url, dataset)
    with session_scope(sqlite_url) as session:
        spend = ledger.spend(session, ledger.lock_budget(session, dataset))
    assert spend.jobs == 2 and spend.epsilon < spend.plain_sum  # composed, not added
    run_job(
        job_id,
        database_url=sqlite_url,
        provider=StaticProvider(FakeBackend()),
        retry=RetryPolicy(retries=0, sleep=lambda _: None),
        progress_interval_s=0.0,
    )
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and not job.touched_data
    assert "needs the local transformers backend" in (job.error or "")
    assert "FakeBackend" in (job.error or "")
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]
    assert ledger_kinds(sqlite_url, other) == ["reserve"]
