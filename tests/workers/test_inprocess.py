"""The embedded worker thread: runs enqueued jobs, recovers a previous process's jobs."""

from __future__ import annotations

import pytest

from app.db.models import JobStatus
from app.llm.provider import StaticProvider
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.factory import get_job, ledger_kinds, make_dataset, make_job, update_job
from workers.celery_app import CeleryQueue
from workers.inprocess import InProcessQueue
from workers.queue_factory import make_queue


class Hooked(FakeBackend):
    def __init__(self, hook) -> None:
        super().__init__(stop_after=3)
        self.hook, self.calls_made = hook, 0

    def next_token_probs(self, prompts, token_sets):
        self.calls_made += 1
        self.hook(self.calls_made)
        return super().next_token_probs(prompts, token_sets)


def queue_for(url: str, backend=None) -> InProcessQueue:
    return InProcessQueue(
        database_url=url, provider=StaticProvider(backend or FakeBackend()), progress_interval_s=0
    )


def test_enqueued_jobs_run_in_order(sqlite_url):
    dataset = make_dataset(sqlite_url)
    jobs = [make_job(sqlite_url, dataset) for _ in range(2)]
    queue = queue_for(sqlite_url).start()
    try:
        for job_id in jobs:
            queue.enqueue(job_id)
        assert queue.join(timeout=30)
    finally:
        queue.close()
    for job_id in jobs:
        assert get_job(sqlite_url, job_id).status == JobStatus.SUCCEEDED
        assert ledger_kinds(sqlite_url, job_id) == ["reserve", "commit"]


def test_start_recovers_the_jobs_a_previous_process_left(sqlite_url):
    dataset = make_dataset(sqlite_url)
    queued, fresh, interrupted = (make_job(sqlite_url, dataset) for _ in range(3))
    update_job(sqlite_url, fresh, status=JobStatus.RUNNING.value, attempts=1)
    update_job(
        sqlite_url, interrupted, status=JobStatus.RUNNING.value, attempts=1, touched_data=True
    )
    queue = queue_for(sqlite_url)
    assert sorted(queue.unfinished_jobs()) == sorted([queued, fresh, interrupted])
    queue.start()
    try:
        assert queue.join(timeout=30)
    finally:
        queue.close()
    assert get_job(sqlite_url, queued).status == JobStatus.SUCCEEDED
    assert get_job(sqlite_url, fresh).status == JobStatus.SUCCEEDED  # never read the data
    assert get_job(sqlite_url, interrupted).status == JobStatus.FAILED
    assert ledger_kinds(sqlite_url, interrupted) == ["reserve", "commit"]


def test_closing_mid_job_fails_it_charged_and_leaves_waiting_jobs_queued(sqlite_url):
    dataset = make_dataset(sqlite_url)
    running, waiting = make_job(sqlite_url, dataset), make_job(sqlite_url, dataset)
    holder: list[InProcessQueue] = []

    def stop_server(n: int) -> None:
        if n == 2:
            holder[0].close()  # what the server's shutdown does, here from the worker thread

    queue = queue_for(sqlite_url, Hooked(stop_server))
    holder.append(queue)
    queue.enqueue(running)
    queue.enqueue(waiting)
    queue.join(timeout=30)
    assert get_job(sqlite_url, running).status == JobStatus.FAILED
    assert get_job(sqlite_url, running).error == "the worker stopped while the job was running"
    assert ledger_kinds(sqlite_url, running) == ["reserve", "commit"]
    assert get_job(sqlite_url, waiting).status == JobStatus.QUEUED
    assert ledger_kinds(sqlite_url, waiting) == ["reserve"]
    with pytest.raises(RuntimeError, match="stopped"):
        queue.enqueue(waiting)


def test_make_queue_picks_celery_only_with_a_broker(sqlite_url):
    queue = make_queue(Settings(database_url=sqlite_url), StaticProvider(FakeBackend()))
    try:
        assert isinstance(queue, InProcessQueue)
    finally:
        queue.close()
    celery = make_queue(Settings(database_url=sqlite_url, broker_url="redis://127.0.0.1:1/0"))
    assert isinstance(celery, CeleryQueue)
    celery.close()  # its dispatcher (the outbox: tests/workers/test_dispatch.py)
    conf = celery.celery.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.broker_transport_options["visibility_timeout"] > Settings().job_timeout_s
