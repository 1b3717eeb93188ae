"""The outbox in one process: which queued jobs are due to be sent again (SQLite and
PostgreSQL), ``SKIP LOCKED`` between dispatchers, the dispatcher's rounds, the embedded
worker's dispatcher, a copy of a task that finds its job running, and migration 0006.
(``test_outbox.py`` does it with real processes: the API SIGKILLed, Redis flushed.)"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from app.db.migrate import alembic_config, upgrade
from app.db.models import Base, Dataset, Job, JobStatus, now
from app.db.session import get_engine, session_scope
from app.llm.provider import StaticProvider
from app.services.job_leases import redispatch_due
from app.services.job_request import JobRequest
from app.services.jobs import submit_job
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job, ledger_kinds, make_dataset, make_job, update_job
from tests.workers.slow_backend import SlowBackend
from workers.inprocess import InProcessQueue
from workers.lease import DispatchConfig, Dispatcher, LeaseConfig
from workers.runner import RetryPolicy, run_job

BOUND_S = 60.0
LONG_AGO = timedelta(minutes=5)
FAST = LeaseConfig(duration_s=1.0, heartbeat_s=0.1, reaper_interval_s=0.05, store_retry_s=2.0)


@pytest.fixture
def url(empty_url: str) -> Iterator[str]:  # noqa: F811
    """A migrated database of the test's own, SQLite and PostgreSQL: a dispatcher sends
    every stale queued job of its database, so none may come from other tests."""
    upgrade(empty_url)
    yield empty_url
    get_engine(empty_url).dispose()


def queued(url: str, dataset: str, *, sent_ago: timedelta | None) -> str:
    """A queued job whose task was last sent ``sent_ago`` ago (None: never recorded)."""
    job_id = make_job(url, dataset)
    update_job(url, job_id, dispatched_at=None if sent_ago is None else now() - sent_ago)
    return job_id


def as_utc(at: datetime) -> datetime:
    """SQLite keeps no zone (every timestamp here is UTC); PostgreSQL returns its own."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def due(url: str, **kwargs: object) -> list[str]:
    with session_scope(url) as session:
        return redispatch_due(session, now(), after_s=BOUND_S, **kwargs)  # type: ignore[arg-type]


def test_only_queued_jobs_sent_longer_ago_than_the_bound_are_due(url):
    dataset = make_dataset(url)
    fresh = make_job(url, dataset)  # admitted just now: its mark is the admission
    stale = queued(url, dataset, sent_ago=LONG_AGO)
    unknown = queued(url, dataset, sent_ago=None)  # written by code older than the mark
    held = queued(url, dataset, sent_ago=LONG_AGO)
    running = queued(url, dataset, sent_ago=LONG_AGO)
    update_job(url, running, status=JobStatus.RUNNING.value)
    finished = queued(url, dataset, sent_ago=LONG_AGO)
    update_job(url, finished, status=JobStatus.SUCCEEDED.value)
    assert get_job(url, fresh).dispatched_at is not None

    before = now()
    assert due(url, exclude=[held]) == [unknown, stale]  # never sent first, then the oldest
    assert as_utc(get_job(url, stale).dispatched_at) >= before  # the mark moved
    assert due(url) == [held]  # the others were sent a moment ago: not due for a bound
    assert due(url) == []


@pytest.mark.parametrize("empty_url", ["postgresql"], indirect=True)  # SQLite: no row locks
def test_a_dispatcher_skips_the_rows_another_one_is_marking(empty_url):  # noqa: F811
    upgrade(empty_url)
    dataset = make_dataset(empty_url)
    first, second = (queued(empty_url, dataset, sent_ago=LONG_AGO) for _ in range(2))
    engine = create_engine(empty_url)
    try:
        with Session(engine) as holding, Session(engine) as other:
            # A worker claiming ``first`` holds its row lock (``SELECT ... FOR UPDATE``).
            holding.scalars(select(Job).where(Job.id == first).with_for_update()).one()
            other.execute(text("SET LOCAL lock_timeout = '2s'"))  # a wait would fail, not hang
            assert redispatch_due(other, now(), after_s=BOUND_S) == [second]
            # ... and a second dispatcher skips what the first has locked and not committed.
            with Session(engine) as third:
                third.execute(text("SET LOCAL lock_timeout = '2s'"))
                assert redispatch_due(third, now(), after_s=BOUND_S) == []
            other.commit()
            holding.rollback()
        with Session(engine) as later:
            assert redispatch_due(later, now(), after_s=BOUND_S) == [first]
            later.commit()
    finally:
        engine.dispose()
        get_engine(empty_url).dispose()


def test_the_dispatcher_sends_each_stale_job_once_per_bound(url, caplog):
    dataset = make_dataset(url)
    stale = [queued(url, dataset, sent_ago=LONG_AGO) for _ in range(2)]
    sent: list[str] = []
    dispatcher = Dispatcher(url, sent.append, DispatchConfig(after_s=BOUND_S))
    assert dispatcher.dispatch_once() == stale
    assert dispatcher.dispatch_once() == []
    assert sent == stale

    down = queued(url, dataset, sent_ago=LONG_AGO)

    def broker_down(job_id: str) -> None:
        raise ConnectionError("redis://127.0.0.1:1: connection refused")

    failing = Dispatcher(url, broker_down, DispatchConfig(after_s=BOUND_S))
    with caplog.at_level(logging.WARNING, logger="workers.lease"):
        assert failing.dispatch_once() == []
    assert f"job {down}: sending its task again failed (ConnectionError)" in caplog.text
    assert get_job(url, down).status == JobStatus.QUEUED  # tried again after the bound


def test_the_dispatcher_thread_sends_a_job_stranded_after_its_admission(sqlite_url):
    dataset = make_dataset(sqlite_url)
    job_id = make_job(sqlite_url, dataset)  # admitted; its task never sent
    admitted = as_utc(get_job(sqlite_url, job_id).dispatched_at)
    # Each send reads the mark its round committed before sending (the bound is measured
    # between marks: a round that is slow to reach its send, on a loaded machine, moves the
    # send later but not the mark).
    sends: list[tuple[str, datetime]] = []

    def send(sent: str) -> None:
        sends.append((sent, as_utc(get_job(sqlite_url, sent).dispatched_at)))

    dispatcher = Dispatcher(sqlite_url, send, DispatchConfig(0.2)).start()
    try:
        deadline = time.monotonic() + 10
        while len(sends) < 2:  # nobody runs it: it stays queued and is sent once per bound
            assert time.monotonic() < deadline, f"the dispatcher sent {sends}"
            time.sleep(0.02)
    finally:
        dispatcher.close()
    assert [job for job, _ in sends[:2]] == [job_id, job_id]
    marks = [admitted, sends[0][1], sends[1][1]]
    bound = timedelta(seconds=0.2)
    assert marks[1] - marks[0] >= bound and marks[2] - marks[1] >= bound, marks


def test_the_embedded_worker_runs_a_queued_job_it_does_not_hold(sqlite_url, caplog):
    dataset = make_dataset(sqlite_url)
    queue = InProcessQueue(
        database_url=sqlite_url,
        provider=StaticProvider(SlowBackend(0.05)),
        progress_interval_s=0,
        dispatch=DispatchConfig(after_s=0.2),
    ).start()
    try:
        with caplog.at_level(logging.INFO, logger="workers.lease"):
            first, waiting = make_job(sqlite_url, dataset), make_job(sqlite_url, dataset)
            queue.enqueue(first)
            queue.enqueue(waiting)  # held in memory behind ``first`` longer than the bound
            # Admitted by another process (or its claim met a database outage): not held.
            orphan = make_job(sqlite_url, dataset)
            deadline = time.monotonic() + 30
            while get_job(sqlite_url, orphan).status != JobStatus.SUCCEEDED:
                assert time.monotonic() < deadline, "the orphan job was never run"
                time.sleep(0.05)
            assert queue.join(timeout=30)
    finally:
        queue.close()
    for job_id in (first, waiting, orphan):
        assert get_job(sqlite_url, job_id).status == JobStatus.SUCCEEDED
        assert get_job(sqlite_url, job_id).attempts == 1
        assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]
    assert f"job {orphan}: queued, its task last sent" in caplog.text
    assert f"job {waiting}: queued" not in caplog.text  # held: never put in twice


def run(url: str, job_id: str, backend: FakeBackend, **kwargs: object) -> None:
    run_job(
        job_id,
        database_url=url,
        provider=StaticProvider(backend),
        retry=RetryPolicy(retries=0),
        progress_interval_s=0.0,
        lease=FAST,
        **kwargs,  # type: ignore[arg-type]
    )


class Counting(FakeBackend):
    def __init__(self) -> None:
        super().__init__(stop_after=3)
        self.calls_made = 0

    def next_token_probs(self, prompts, token_sets):
        self.calls_made += 1
        return super().next_token_probs(prompts, token_sets)


@pytest.mark.parametrize("touched", [True, False])
def test_a_copy_that_finds_its_job_running_under_a_live_lease_does_nothing(
    sqlite_url, touched, caplog
):
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))
    update_job(
        sqlite_url,
        job_id,
        status=JobStatus.RUNNING.value,
        attempts=1,
        touched_data=touched,
        lease_owner="worker-x:1:abc",
        lease_expires_at=now() + timedelta(minutes=1),  # its heartbeat renews it
    )
    backend = Counting()
    with caplog.at_level(logging.INFO, logger="workers.runner"):
        run(sqlite_url, job_id, backend)
    job = get_job(sqlite_url, job_id)
    assert backend.calls_made == 0
    assert job.status == JobStatus.RUNNING and job.attempts == 1
    assert job.lease_owner == "worker-x:1:abc" and job.error is None
    assert ledger_kinds(sqlite_url, job_id) == ["reserve"]
    assert f"job {job_id}: running under the live lease of worker-x:1:abc" in caplog.text


def test_the_embedded_server_takes_over_a_job_its_previous_process_left_mid_lease(sqlite_url):
    # Restarted within the lease: the lease looks live, but its holder was this server.
    job_id = make_job(sqlite_url, make_dataset(sqlite_url))
    update_job(
        sqlite_url,
        job_id,
        status=JobStatus.RUNNING.value,
        attempts=1,
        lease_owner="embedded:1:abc",
        lease_expires_at=now() + timedelta(minutes=1),
    )
    queue = InProcessQueue(
        database_url=sqlite_url, provider=StaticProvider(FakeBackend()), progress_interval_s=0
    ).start()
    try:
        assert queue.join(timeout=30)
    finally:
        queue.close()
    job = get_job(sqlite_url, job_id)
    assert job.status == JobStatus.SUCCEEDED and job.attempts == 2  # never read: ran again
    assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


JOB_ROW = (
    "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, event, epsilon, "
    "delta, status, progress_done, progress_total, touched_data, cancel_requested, attempts, "
    "created_at) VALUES (:id, 't', 'd', 'tang', '{}', '[]', '{}', 1.0, 1e-5, :status, 0, 0, "
    "false, false, 0, :at)"
)
ADMITTED = {"at": "2026-01-01 00:00:00"}


def test_0006_makes_old_queued_jobs_due_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0005")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :at)"),
                ADMITTED,
            )
            conn.execute(
                text(
                    "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, "
                    "record_count, created_at) VALUES ('d', 't', 'd', 'private', '{}', '{}', "
                    "0, :at)"
                ),
                ADMITTED,
            )
            for job_id in ("queued", "running", "succeeded"):
                conn.execute(text(JOB_ROW), {"id": job_id, "status": job_id, **ADMITTED})
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        with Session(engine) as session:
            jobs = {job.id: job for job in session.scalars(select(Job))}
            assert jobs["queued"].dispatched_at == jobs["queued"].created_at  # long due
            assert jobs["running"].dispatched_at is None
            assert jobs["succeeded"].dispatched_at is None
            assert redispatch_due(session, now(), after_s=BOUND_S) == ["queued"]
            session.commit()
        command.downgrade(config, "0005")
        with engine.connect() as conn:
            columns = list(conn.execute(text("SELECT * FROM jobs")).keys())
            assert "dispatched_at" not in columns and "lease_owner" in columns
        command.upgrade(config, "head")
    finally:
        engine.dispose()
        get_engine(empty_url).dispose()


def test_concurrent_dispatchers_send_a_stale_job_once(url):
    dataset = make_dataset(url)
    stale = [queued(url, dataset, sent_ago=LONG_AGO) for _ in range(6)]
    sent: list[str] = []
    lock = threading.Lock()

    def send(job_id: str) -> None:
        with lock:
            sent.append(job_id)

    dispatchers = [Dispatcher(url, send, DispatchConfig(after_s=BOUND_S)) for _ in range(4)]
    errors: list[BaseException] = []

    def round_of(dispatcher: Dispatcher) -> None:
        try:
            dispatcher.dispatch_once()
        except Exception as err:  # SQLite: a writer may find the database busy; retried later
            errors.append(err)

    threads = [threading.Thread(target=round_of, args=(d,)) for d in dispatchers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(sent) == sorted(stale)  # each once, whichever dispatcher sent it
    assert errors == []


def test_a_submission_whose_send_failed_after_a_copy_started_its_job_is_admitted(sqlite_url):
    # The broker timed out on the API's send for longer than the bound, and a dispatcher's
    # copy got the job started meanwhile: failing it now would fail a running job.
    dataset = make_dataset(sqlite_url)

    class SlowBrokerQueue:
        def enqueue(self, job_id: str) -> None:
            update_job(sqlite_url, job_id, status=JobStatus.RUNNING.value, attempts=1)
            raise ConnectionError("the broker did not answer")

    with session_scope(sqlite_url) as session:
        tenant = session.get(Dataset, dataset).tenant_id
        asked = JobRequest(
            dataset_id=dataset,
            method="adadpsyn",
            epsilon=2.0,
            shots=2,
            params={"M": 4, "N": 2, "tmax": 4, "K": 10},
        )
        job = submit_job(session, SlowBrokerQueue(), asked, tenant_id=tenant)
    assert job.status == JobStatus.RUNNING and job.error is None
    assert get_job(sqlite_url, job.id).status == JobStatus.RUNNING
    assert ledger_kinds(sqlite_url, job.id) == ["reserve"]  # the running attempt settles it
