"""``run_job`` on PromptPATE jobs (SQLite, fake backend): the same fencing and charging rules
as token-loop jobs, progress in public inputs, and the answered count on the job."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import delete

from app.db import record_keys
from app.db.models import Dataset, DatasetRecord, JobStatus, now
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import (
    PATE,
    PUBLIC_TEXTS,
    SECRET,
    get_job,
    ledger_kinds,
    make_dataset,
    make_pate_job,
    make_public_dataset,
    prompt_sets,
    update_job,
)
from workers.inprocess import InProcessQueue
from workers.runner import RetryPolicy, run_job


class Watching(FakeBackend):
    """The fake backend, calling ``hook(n)`` before its n-th ``next_token_probs`` (1-based)."""

    def __init__(self, hook=None) -> None:
        super().__init__(stop_after=None)
        self.hook = hook
        self.probs_calls = 0

    def next_token_probs(self, prompts, token_sets):
        self.probs_calls += 1
        if self.hook is not None:
            self.hook(self.probs_calls)
        return super().next_token_probs(prompts, token_sets)


@pytest.fixture
def ids(sqlite_url) -> tuple[str, str, str]:
    """(private dataset, public dataset, admitted PromptPATE job)."""
    dataset = make_dataset(sqlite_url)
    public = make_public_dataset(sqlite_url, dataset)
    return dataset, public, make_pate_job(sqlite_url, dataset, public)


def run(url: str, job_id: str, backend: FakeBackend | None = None, **kwargs) -> None:
    run_job(
        job_id,
        database_url=url,
        provider=StaticProvider(backend or Watching()),
        retry=RetryPolicy(retries=0, sleep=lambda _: None),
        progress_interval_s=0.0,
        **kwargs,
    )


def test_success_stores_the_prompt_the_answered_count_and_commits(sqlite_url, ids, caplog):
    caplog.set_level(logging.DEBUG)
    _, _, job_id = ids
    seen: list[int] = []
    backend = Watching(lambda n: seen.append(get_job(sqlite_url, job_id).progress_done))
    run(sqlite_url, job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.SUCCEEDED and job.error is None
    assert job.touched_data and job.attempts == 1
    assert job.progress_total == PUBLIC_TEXTS
    stats = job.stats
    assert stats is not None and "teachers_voting" not in stats and "seconds" not in stats
    assert job.progress_done == stats["processed"] and stats["answered"] >= PATE["student_shots"]
    # progress was written after every group of public inputs, while the job ran
    assert {0, PATE["group_size"]} <= set(seen)
    # and within the first group, as the teachers' calls came in (not 0 until it ends)
    assert any(0 < done < PATE["group_size"] for done in seen)
    (prompt_set,) = prompt_sets(sqlite_url, job_id)
    assert job.prompt_set_id == prompt_set.id and prompt_set.method == "promptpate"
    assert prompt_set.epsilon == pytest.approx(job.epsilon) and prompt_set.task["name"] == "trec"
    assert len(prompt_set.demonstrations) == PATE["student_shots"]
    assert all(d["text"].startswith("public_") for d in prompt_set.demonstrations)
    assert SECRET not in prompt_set.prompt
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert SECRET not in caplog.text
    calls = backend.probs_calls
    run(sqlite_url, job_id, backend)  # a redelivered task
    assert backend.probs_calls == calls and len(prompt_sets(sqlite_url, job_id)) == 1
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_cancellation_stops_the_job_within_a_group_charged(sqlite_url, ids):
    _, _, job_id = ids

    def cancel(n: int) -> None:
        if n == 1:
            update_job(sqlite_url, job_id, cancel_requested=True)

    backend = Watching(cancel)
    run(sqlite_url, job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.CANCELLED and job.touched_data
    # seen at the progress report after the first teacher's call, not at the group's end
    assert backend.probs_calls == 1 < PATE["teachers"]
    assert prompt_sets(sqlite_url, job_id) == []
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_a_deleted_public_dataset_fails_the_job_before_touching_and_releases(sqlite_url, ids):
    _, public, job_id = ids
    with session_scope(sqlite_url) as session:
        session.execute(delete(DatasetRecord).where(DatasetRecord.dataset_id == public))
        session.get(Dataset, public).deleted_at = now()
    backend = Watching()
    run(sqlite_url, job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and not job.touched_data
    assert job.error == "the public dataset was deleted before the job started"
    assert backend.probs_calls == 0
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_public_records_that_changed_fail_the_job_before_touching(sqlite_url, ids):
    _, public, job_id = ids
    with session_scope(sqlite_url) as session:
        [sealed] = record_keys.current().seal_records(public, [("one more", "")])
        session.add(DatasetRecord(dataset_id=public, sealed=sealed))
    run(sqlite_url, job_id)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and not job.touched_data
    assert job.error == (
        f"the public dataset has {PUBLIC_TEXTS + 1} records but the job was admitted for "
        f"{PUBLIC_TEXTS}"
    )
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_a_plan_that_differs_from_the_reservation_is_refused(sqlite_url, ids):
    _, _, job_id = ids
    config = dict(get_job(sqlite_url, job_id).config)
    config["pate"] = {**config["pate"], "epsilon": 8.0}  # would spend more than reserved
    update_job(sqlite_url, job_id, config=config)
    run(sqlite_url, job_id)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and not job.touched_data
    assert "does not match the privacy event it reserved" in job.error
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_failure_after_touching_names_no_record_and_stays_charged(sqlite_url, ids, caplog):
    _, _, job_id = ids

    def boom(n: int) -> None:
        if n == 2:
            raise RuntimeError(f"{SECRET}Person_1 leaked into an exception")

    run(sqlite_url, job_id, Watching(boom))
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and job.touched_data
    assert job.error == f"internal error (RuntimeError) in job {job_id}; see the worker log"
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert SECRET not in caplog.text


def test_too_few_answers_for_a_student_prompt_fail_with_a_safe_message(sqlite_url):
    dataset = make_dataset(sqlite_url)
    public = make_public_dataset(sqlite_url, dataset)
    # noise so small that the filter's budget cannot afford a single query: nothing labelled
    job_id = make_pate_job(sqlite_url, dataset, public, sigma_threshold=0.001, sigma_gnmax=0.001)
    run(sqlite_url, job_id)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and job.touched_data
    assert "public input(s) were labelled" in job.error and SECRET not in job.error
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_the_embedded_worker_runs_a_promptpate_job(sqlite_url, ids):
    _, _, job_id = ids
    queue = InProcessQueue(
        database_url=sqlite_url, provider=StaticProvider(Watching()), progress_interval_s=0
    ).start()
    try:
        queue.enqueue(job_id)
        assert queue.join(timeout=60)
    finally:
        queue.close()
    assert get_job(sqlite_url, job_id).status == JobStatus.SUCCEEDED
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
