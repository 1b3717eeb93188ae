"""``run_job`` on SQLite with the fake backend: results, idempotence, and who pays what."""

from __future__ import annotations

import logging

import httpx
import pytest
from sqlalchemy import delete

from app.db.models import DatasetRecord, JobStatus
from app.db.session import session_scope
from app.llm.base import BackendError, TransientBackendError
from app.llm.provider import StaticProvider
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import (
    SECRET,
    get_job,
    ledger_kinds,
    make_dataset,
    make_job,
    planned,
    prompt_sets,
    update_job,
)
from workers.runner import RetryPolicy, run_job


class HookedBackend(FakeBackend):
    """The fake backend, calling ``hook(n)`` before its n-th ``next_token_probs`` (1-based)."""

    def __init__(self, hook=None) -> None:
        super().__init__(stop_after=3)
        self.hook = hook
        self.probs_calls = 0

    def next_token_probs(self, prompts, token_sets):
        self.probs_calls += 1
        if self.hook is not None:
            self.hook(self.probs_calls)
        return super().next_token_probs(prompts, token_sets)


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def run(sqlite_url, sleeps):
    def _run(job_id: str, backend=None, **kwargs) -> None:
        provider = kwargs.pop("provider", None) or StaticProvider(backend or HookedBackend())
        run_job(
            job_id,
            database_url=sqlite_url,
            provider=provider,
            retry=RetryPolicy(retries=3, base_delay_s=1.0, sleep=sleeps),
            progress_interval_s=0.0,
            **kwargs,
        )

    return _run


@pytest.fixture
def job_id(sqlite_url) -> str:
    return make_job(sqlite_url, make_dataset(sqlite_url))


def test_success_stores_one_prompt_set_and_commits_the_charge(sqlite_url, job_id, run, caplog):
    caplog.set_level(logging.DEBUG)
    run(job_id)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.SUCCEEDED
    assert job.touched_data and job.attempts == 1 and job.error is None
    assert job.progress_total == 2 * 4 and job.progress_done == job.progress_total
    assert job.started_at is not None and job.finished_at is not None
    (prompt_set,) = prompt_sets(sqlite_url, job_id)
    assert job.prompt_set_id == prompt_set.id
    assert [d["label"] for d in prompt_set.demonstrations] == list(planned().schedule)
    assert prompt_set.epsilon == pytest.approx(job.epsilon)
    assert SECRET not in prompt_set.prompt
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert SECRET not in caplog.text


def test_running_a_finished_job_again_changes_nothing(sqlite_url, job_id, run):
    backend = HookedBackend()
    run(job_id, backend)
    calls = backend.probs_calls
    run(job_id, backend)  # a redelivered task
    assert backend.probs_calls == calls  # the second delivery did not touch the model
    assert len(prompt_sets(sqlite_url, job_id)) == 1
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert get_job(sqlite_url, job_id).attempts == 1


def test_cancellation_between_tokens_stops_the_job_charged(sqlite_url, job_id, run):
    def cancel(n: int) -> None:
        if n == 2:
            update_job(sqlite_url, job_id, cancel_requested=True)

    backend = HookedBackend(cancel)
    run(job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.CANCELLED
    assert backend.probs_calls == 2  # stopped right after the token during which it was asked
    assert job.touched_data and job.prompt_set_id is None
    assert prompt_sets(sqlite_url, job_id) == []
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_cancellation_before_start_releases_the_reservation(sqlite_url, job_id, run):
    update_job(sqlite_url, job_id, cancel_requested=True)
    backend = HookedBackend()
    run(job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.CANCELLED and not job.touched_data
    assert backend.probs_calls == 0
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_failure_after_touching_the_data_stays_charged(sqlite_url, job_id, run, caplog):
    def boom(n: int) -> None:
        if n == 2:
            raise RuntimeError(f"{SECRET}Person_1 leaked into an exception")

    run(job_id, HookedBackend(boom))
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and job.touched_data
    assert job.error == f"internal error (RuntimeError) in job {job_id}; see the worker log"
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert prompt_sets(sqlite_url, job_id) == []
    assert "RuntimeError" in caplog.text and SECRET not in caplog.text


def test_deleted_records_fail_the_job_before_touching_and_release(sqlite_url, job_id, run):
    job = get_job(sqlite_url, job_id)
    with session_scope(sqlite_url) as session:
        session.execute(delete(DatasetRecord).where(DatasetRecord.dataset_id == job.dataset_id))
    backend = HookedBackend()
    run(job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and not job.touched_data
    # checked against the dataset's own row; the message names no count (issue 41)
    assert job.error == (
        "the dataset's records changed since the job was admitted; submit it again"
    )
    assert backend.probs_calls == 0
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_a_backend_that_cannot_be_built_fails_before_touching_and_releases(
    sqlite_url, job_id, run, sleeps
):
    class Broken(StaticProvider):
        builds = 0

        def get(self):
            Broken.builds += 1
            raise TransientBackendError("vLLM server http://gpu:8000 /tokenize: connection refused")

    run(job_id, provider=Broken(FakeBackend()))
    job = get_job(sqlite_url, job_id)
    assert Broken.builds == 4 and sleeps == [1.0, 2.0, 4.0]
    assert job.status == JobStatus.FAILED and not job.touched_data
    assert job.error == (
        "backend_unreachable: the model server could not be reached (timeout or lost connection)"
    )
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_transient_backend_errors_are_retried_with_backoff_then_succeed(
    sqlite_url, job_id, run, sleeps
):
    failures = iter([TransientBackendError("HTTP 503"), TransientBackendError("timed out")])

    def flaky(n: int) -> None:
        if n in (2, 3):
            raise next(failures)

    backend = HookedBackend(flaky)
    run(job_id, backend)
    assert sleeps == [1.0, 2.0]
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 1
    assert len(prompt_sets(sqlite_url, job_id)) == 1
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_backend_errors_that_persist_fail_the_job_charged(sqlite_url, job_id, run, sleeps):
    def down(n: int) -> None:
        if n >= 2:
            raise TransientBackendError(f"server down at {SECRET}", status=503)

    run(job_id, HookedBackend(down))
    job = get_job(sqlite_url, job_id)
    assert sleeps == [1.0, 2.0, 4.0]
    assert job.status == JobStatus.FAILED and job.touched_data
    assert job.error == (
        "backend_unavailable: the model server did not answer after the retries (HTTP 503)"
    )
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            BackendError(f"/v1/completions: HTTP 400: cannot tokenize {SECRET}", status=400),
            "backend_rejected: the model server refused the request (HTTP 400)",
        ),
        (
            BackendError(f"fake: empty batch {SECRET}"),
            "backend_failed: the model backend could not answer (BackendError)",
        ),
        (  # a backend must wrap its transport errors
            httpx.ConnectError(f"refused {SECRET}"),
            "backend_unreachable: the model server could not be reached (timeout or lost "
            "connection)",
        ),
    ],
)
def test_final_backend_errors_fail_at_once_without_retry(
    sqlite_url, job_id, run, sleeps, error, expected
):
    def rejected(n: int) -> None:
        if n == 2:
            raise error

    backend = HookedBackend(rejected)
    run(job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert sleeps == [] and backend.probs_calls == 2  # asked once, never again
    assert job.status == JobStatus.FAILED and job.touched_data
    assert job.error == expected  # a code and our words: never the message (issue 21)
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_a_job_interrupted_after_touching_the_data_is_not_run_again(sqlite_url, job_id, run):
    # What a redelivered task finds after its worker died mid-job.
    update_job(sqlite_url, job_id, status=JobStatus.RUNNING.value, touched_data=True, attempts=1)
    backend = HookedBackend()
    run(job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert backend.probs_calls == 0
    assert job.status == JobStatus.FAILED and "stopped after it had read" in job.error
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_a_job_interrupted_before_touching_the_data_runs_again(sqlite_url, job_id, run):
    update_job(sqlite_url, job_id, status=JobStatus.RUNNING.value, attempts=1)
    run(job_id)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 2
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_a_job_started_too_often_is_given_up_released(sqlite_url, job_id, run):
    update_job(sqlite_url, job_id, status=JobStatus.RUNNING.value, attempts=3)
    backend = HookedBackend()
    run(job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert backend.probs_calls == 0
    assert (
        job.status == JobStatus.FAILED
        and job.error == "the job was started 3 times without finishing"
    )
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_a_superseded_attempt_stops_without_writing(sqlite_url, job_id, run):
    def take_over(n: int) -> None:
        if n == 2:  # another delivery claimed the job meanwhile
            update_job(sqlite_url, job_id, attempts=5)

    run(job_id, HookedBackend(take_over))
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.RUNNING and job.prompt_set_id is None
    assert prompt_sets(sqlite_url, job_id) == []
    assert ledger_kinds(sqlite_url, job_id) == ["reserve"]


def test_a_plan_that_differs_from_the_reservation_is_refused(sqlite_url, job_id, run):
    job = get_job(sqlite_url, job_id)
    config = dict(job.config)
    config["plan"] = {**config["plan"], "tmax": 3}  # would run fewer steps than reserved
    update_job(sqlite_url, job_id, config=config)
    run(job_id)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and not job.touched_data
    assert "does not match the privacy event it reserved" in job.error
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "release"]


def test_timeout_fails_the_job_charged(sqlite_url, job_id, run):
    run(job_id, timeout_s=0.0)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and job.touched_data
    assert job.error == "the job ran longer than the limit of 0 s"
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_unknown_job_is_ignored(sqlite_url, job_id, run, caplog):
    """A task for a job that does not exist (deleted, or another deployment's) returns
    quietly: it raises nothing, never calls the model and writes nothing, to that id or to
    any other job; one warning names the id."""
    caplog.set_level(logging.INFO, logger="workers.runner")
    backend = HookedBackend()
    run("0" * 32, backend)
    assert backend.probs_calls == 0 and backend.calls == []
    job = get_job(sqlite_url, job_id)  # the one job there is stays as it was
    assert job.status == JobStatus.QUEUED and job.attempts == 0 and job.lease_owner is None
    assert ledger_kinds(sqlite_url, job_id) == ["reserve"] and prompt_sets(sqlite_url, job_id) == []
    assert ledger_kinds(sqlite_url, "0" * 32) == [] and prompt_sets(sqlite_url, "0" * 32) == []
    assert [r.getMessage() for r in caplog.records if r.name == "workers.runner"] == [
        f"job {'0' * 32}: no such job; nothing to run"
    ]
