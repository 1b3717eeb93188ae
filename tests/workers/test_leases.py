"""Leases on SQLite, in one process: the reaper's settlement, the heartbeat, cancellation of
an expired lease, the final store's retries, the embedded server's reaper and migration 0003.
(``test_faults.py`` does the same with real processes, SIGKILL and a stopped PostgreSQL.)"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

import workers.runner as runner
from app.db.models import Job, JobStatus, now
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.services.job_leases import reap_job
from app.services.jobs import cancel_job
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import (
    get_job,
    ledger_kinds,
    make_dataset,
    make_job,
    prompt_sets,
    update_job,
)
from workers.inprocess import InProcessQueue
from workers.lease import Heartbeat, LeaseConfig, Reaper, live_owners
from workers.runner import DatabaseUnavailableError, RetryPolicy, run_job

FAST = LeaseConfig(duration_s=1.0, heartbeat_s=0.1, reaper_interval_s=0.05, store_retry_s=2.0)
PAST = datetime(2026, 1, 1, tzinfo=UTC)


class Hooked(FakeBackend):
    """Calls ``hook(n)`` before its n-th ``next_token_probs``."""

    def __init__(self, hook=None) -> None:
        super().__init__(stop_after=3)
        self.hook, self.calls_made = hook, 0

    def next_token_probs(self, prompts, token_sets):
        self.calls_made += 1
        if self.hook is not None:
            self.hook(self.calls_made)
        return super().next_token_probs(prompts, token_sets)


def run(url: str, job_id: str, backend=None, lease: LeaseConfig = FAST, sleep=None) -> None:
    run_job(
        job_id,
        database_url=url,
        provider=StaticProvider(backend or Hooked()),
        retry=RetryPolicy(retries=0),
        progress_interval_s=0.0,
        lease=lease,
        sleep=sleep or time.sleep,
    )


def running(url: str, dataset: str, *, expires: datetime, **values: object) -> str:
    """A job as a worker left it: running, attempt 1, under a lease of ``worker-x``."""
    job_id = make_job(url, dataset)
    update_job(
        url,
        job_id,
        status=JobStatus.RUNNING.value,
        attempts=1,
        lease_owner="worker-x:1:abc",
        lease_expires_at=expires,
        **values,
    )
    return job_id


def test_the_reaper_settles_expired_leases_and_only_those(sqlite_url):
    dataset = make_dataset(sqlite_url)
    read = running(sqlite_url, dataset, expires=PAST, touched_data=True)
    unread = running(sqlite_url, dataset, expires=PAST)
    cancelled = running(sqlite_url, dataset, expires=PAST, touched_data=True, cancel_requested=True)
    alive = running(sqlite_url, dataset, expires=now() + timedelta(minutes=5), touched_data=True)

    reaped = Reaper(sqlite_url, FAST).reap_once()

    assert sorted(reaped) == sorted([read, unread, cancelled])
    assert get_job(sqlite_url, read).status == JobStatus.FAILED
    assert "lease expired" in get_job(sqlite_url, read).error
    assert ledger_kinds(sqlite_url, read) == ["reserve", "commit"]  # it read the data: charged
    assert get_job(sqlite_url, unread).status == JobStatus.FAILED
    assert "released" in get_job(sqlite_url, unread).error
    assert ledger_kinds(sqlite_url, unread) == ["reserve", "release"]
    assert get_job(sqlite_url, cancelled).status == JobStatus.CANCELLED
    assert ledger_kinds(sqlite_url, cancelled) == ["reserve", "commit"]
    assert get_job(sqlite_url, alive).status == JobStatus.RUNNING
    assert ledger_kinds(sqlite_url, alive) == ["reserve"]
    assert Reaper(sqlite_url, FAST).reap_once() == []  # nothing is settled twice


def test_a_redelivered_task_of_a_reaped_job_neither_runs_nor_charges_again(sqlite_url):
    job_id = running(sqlite_url, make_dataset(sqlite_url), expires=PAST, touched_data=True)
    Reaper(sqlite_url, FAST).reap_once()
    backend = Hooked()
    run(sqlite_url, job_id, backend)
    assert backend.calls_made == 0
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.FAILED and job.attempts == 1
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert prompt_sets(sqlite_url, job_id) == []


def test_the_reaper_spares_the_attempts_its_own_process_runs(sqlite_url):
    job_id = running(sqlite_url, make_dataset(sqlite_url), expires=PAST, touched_data=True)
    slow = LeaseConfig(duration_s=60, heartbeat_s=30)  # no renewal while the block runs
    with Heartbeat(sqlite_url, job_id, "worker-x:1:abc", slow):
        assert "worker-x:1:abc" in live_owners()
        assert Reaper(sqlite_url, FAST).reap_once() == []
    assert "worker-x:1:abc" not in live_owners()
    assert Reaper(sqlite_url, FAST).reap_once() == [job_id]


def test_the_heartbeat_renews_the_lease_while_the_job_runs_and_stops_with_it(sqlite_url):
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))
    expiries: list[datetime] = []

    def watch(n: int) -> None:
        time.sleep(0.25)  # longer than the heartbeat interval
        expiries.append(get_job(sqlite_url, job_id).lease_expires_at)

    run(sqlite_url, job_id, Hooked(watch))
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.SUCCEEDED and job.lease_owner
    assert len(expiries) >= 3 and expiries == sorted(expiries) and expiries[-1] > expiries[0]
    assert not [t for t in threading.enumerate() if t.name.startswith("dpsyn-heartbeat")]
    assert live_owners() == frozenset()


def test_an_attempt_whose_job_was_reaped_stops_without_writing(sqlite_url):
    # The worker was alive but slow (a pause longer than the lease): another worker's reaper
    # ended the job; the attempt must neither store a result nor change the charge.
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))

    def reaped_elsewhere(n: int) -> None:
        if n == 2:
            with session_scope(sqlite_url) as session:
                assert reap_job(session, job_id, now() + timedelta(hours=1)) is not None

    backend = Hooked(reaped_elsewhere)
    run(sqlite_url, job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert backend.calls_made == 2
    assert job.status == JobStatus.FAILED and "lease expired" in job.error
    assert prompt_sets(sqlite_url, job_id) == []
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_cancelling_a_job_whose_lease_expired_takes_effect_at_once(sqlite_url):
    dataset = make_dataset(sqlite_url)
    dead = running(sqlite_url, dataset, expires=PAST, touched_data=True)
    alive = running(sqlite_url, dataset, expires=now() + timedelta(minutes=5), touched_data=True)
    tenant = get_job(sqlite_url, dead).tenant_id
    with session_scope(sqlite_url) as session:
        assert cancel_job(session, tenant, dead).status == JobStatus.CANCELLED
        assert cancel_job(session, tenant, alive).status == JobStatus.RUNNING  # its worker stops it
    assert "lease expired" in get_job(sqlite_url, dead).error
    assert ledger_kinds(sqlite_url, dead) == ["reserve", "commit"]
    assert get_job(sqlite_url, alive).cancel_requested
    assert ledger_kinds(sqlite_url, alive) == ["reserve"]


def flaky_sessions(monkeypatch, *, fail: set[int], after_commit: set[int]) -> list[int]:
    """Make the runner's n-th session fail to reach the database (``fail``), or commit and
    then lose the reply (``after_commit``, the ambiguous case of a real outage)."""
    real, count = runner.session_scope, [0]

    @contextmanager
    def scope(url: str):
        count[0] += 1
        n = count[0]
        if n in fail:
            raise OperationalError("connect", {}, ConnectionRefusedError("database down"))
        with real(url) as session:
            yield session
        if n in after_commit:
            raise OperationalError("commit", {}, ConnectionResetError("reply lost"))

    monkeypatch.setattr(runner, "session_scope", scope)
    return count


def store_session_number(url: str) -> int:
    """How many sessions the runner opens before the final store (counted on a clean run)."""
    job_id = make_job(url, make_dataset(url))
    return _count_sessions(url, job_id)


def _count_sessions(url: str, job_id: str) -> int:
    opened = []
    real = runner.session_scope

    @contextmanager
    def scope(u: str):
        opened.append(1)
        with real(u) as session:
            yield session

    runner.session_scope, saved = scope, runner.session_scope
    try:
        run(url, job_id)
    finally:
        runner.session_scope = saved
    return len(opened)


def test_the_final_store_is_retried_and_stored_once_even_when_a_commit_reply_is_lost(
    sqlite_url, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger="workers.runner")
    last = store_session_number(sqlite_url)  # the final store is the run's last session
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))
    sleeps: list[float] = []
    flaky_sessions(monkeypatch, fail={last, last + 1}, after_commit={last + 2})
    run(sqlite_url, job_id, sleep=sleeps.append)
    job = get_job(sqlite_url, job_id)
    assert sleeps == [0.25, 0.5, 1.0]  # two refused, one committed with its reply lost
    assert job.status == JobStatus.SUCCEEDED
    # the retry recognised its own commit (not "another attempt")
    assert f"job {job_id}: succeeded" in caplog.text and "superseded" not in caplog.text
    assert len(prompt_sets(sqlite_url, job_id)) == 1
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_a_store_that_outlasts_its_budget_leaves_the_job_to_the_lease(
    sqlite_url, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger="workers.runner")
    last = store_session_number(sqlite_url)
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))
    flaky_sessions(monkeypatch, fail=set(range(last, last + 100)), after_commit=set())
    lease = LeaseConfig(duration_s=0.3, heartbeat_s=0.1, store_retry_s=0.5)
    run(sqlite_url, job_id, lease=lease)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.RUNNING and job.touched_data  # nothing could be written
    assert caplog.text.count("could not store its outcome") == 1
    assert "failed with" not in caplog.text  # the result was not turned into a failure
    assert live_owners() == frozenset()  # the heartbeat stopped: the lease runs out
    time.sleep(0.4)
    assert Reaper(sqlite_url, lease).reap_once() == [job_id]
    assert get_job(sqlite_url, job_id).status == JobStatus.FAILED
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_the_embedded_server_reaps_and_spares_the_jobs_it_recovers(sqlite_url):
    dataset = make_dataset(sqlite_url)
    recovered = running(sqlite_url, dataset, expires=PAST)  # a previous process's, unread
    queue = InProcessQueue(
        database_url=sqlite_url,
        provider=StaticProvider(FakeBackend()),
        progress_interval_s=0,
        lease=FAST,
    ).start()
    try:
        assert queue.join(timeout=30)
        orphan = running(sqlite_url, dataset, expires=PAST, touched_data=True)
        deadline = time.monotonic() + 10
        while get_job(sqlite_url, orphan).status == JobStatus.RUNNING:
            assert time.monotonic() < deadline, "the embedded reaper did not settle the job"
            time.sleep(0.05)
    finally:
        queue.close()
    assert get_job(sqlite_url, recovered).status == JobStatus.SUCCEEDED  # ran again
    assert get_job(sqlite_url, recovered).attempts == 2
    assert get_job(sqlite_url, orphan).status == JobStatus.FAILED
    assert ledger_kinds(sqlite_url, orphan) == ["reserve", "commit"]


def test_migration_0003_gives_jobs_running_before_it_an_expired_lease(tmp_path: Path):
    from alembic import command

    from app.db.migrate import alembic_config, upgrade
    from app.db.session import get_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    config = alembic_config(url)
    command.upgrade(config, "0002")
    with get_engine(url).begin() as conn:
        conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :at)"), {"at": PAST}
        )
        conn.execute(
            text(
                "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, "
                "record_count, created_at) VALUES ('d', 't', 'd', 'private', '{}', '{}', 0, :at)"
            ),
            {"at": PAST},
        )
        for job_id, status in (("old-running", "running"), ("old-queued", "queued")):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, "
                    "event, epsilon, delta, status, progress_done, progress_total, "
                    "touched_data, cancel_requested, attempts, created_at) VALUES (:id, 't', "
                    "'d', 'tang', '{}', '[]', '{}', 1, 0, :status, 0, 0, 0, 0, 1, :at)"
                ),
                {"id": job_id, "status": status, "at": PAST},
            )
    get_engine(url).dispose()
    before = now()
    upgrade(url)
    with session_scope(url) as session:
        old_running, old_queued = session.get(Job, "old-running"), session.get(Job, "old-queued")
        assert old_running.lease_expires_at is not None
        assert old_running.lease_expires_at.replace(tzinfo=UTC) >= before - timedelta(seconds=1)
        assert old_queued.lease_expires_at is None
        assert [old_running.id] == [
            job.id for job in session.query(Job).filter(Job.lease_expires_at.is_not(None))
        ]


def test_a_job_that_cannot_be_claimed_stays_queued_for_a_later_delivery(sqlite_url, monkeypatch):
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))
    flaky_sessions(monkeypatch, fail=set(range(1, 100)), after_commit=set())
    lease = LeaseConfig(duration_s=1.0, heartbeat_s=0.1, store_retry_s=0.3)
    with pytest.raises(DatabaseUnavailableError):  # the Celery task retries it later
        run(sqlite_url, job_id, lease=lease)
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.QUEUED and job.attempts == 0
    assert ledger_kinds(sqlite_url, job_id) == ["reserve"]


def test_deleting_a_dataset_settles_a_running_job_whose_lease_expired(sqlite_url):
    """The killed worker's job no longer blocks deletion; a live one still does."""
    from app.services.datasets import delete_dataset
    from app.services.errors import ConflictError

    dataset = make_dataset(sqlite_url)
    alive = running(sqlite_url, dataset, expires=now() + timedelta(minutes=5), touched_data=True)
    tenant = get_job(sqlite_url, alive).tenant_id
    with session_scope(sqlite_url) as session, pytest.raises(ConflictError) as refused:
        delete_dataset(session, tenant, dataset)
    assert refused.value.extra["jobs"] == [alive]

    other = make_dataset(sqlite_url)
    dead = running(sqlite_url, other, expires=PAST, touched_data=True)
    with session_scope(sqlite_url) as session:
        deleted = delete_dataset(session, get_job(sqlite_url, dead).tenant_id, other)
        assert deleted.deleted_at is not None
    assert get_job(sqlite_url, dead).status == JobStatus.CANCELLED
    assert ledger_kinds(sqlite_url, dead) == ["reserve", "commit"]  # it had read the data
