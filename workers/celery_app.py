"""The Celery app of the distributed deployment: API processes enqueue, workers run jobs.

Start a worker with ``dpsyn worker`` (or ``celery -A workers.celery_app worker``); settings
come from ``DPSYN_*`` variables, the broker from ``DPSYN_BROKER_URL``. Tasks carry only a job
ID and :func:`workers.runner.run_job` is idempotent, so late acknowledgement is safe: a task
whose worker died is delivered again, and the runner decides from the job row what to do. The
Redis visibility timeout is longer than the longest job, so a job still running is never
delivered a second time.

Test hook: ``DPSYN_TEST_FAKE_BACKEND=1`` makes the worker use the deterministic fake backend
of the test suite (``tests.synthesis.fake_backend``) instead of a model, slowed down by
``DPSYN_TEST_FAKE_BACKEND_DELAY_S`` seconds per model call if set (so that a fault test can
kill the worker mid-job). Both are read only here, only by the test suite's end-to-end tests,
and refused in production.
"""

from __future__ import annotations

import os
import threading

from celery import Celery

from app.llm.provider import BackendProvider, StaticProvider
from app.settings import Settings, get_settings
from workers.runner import run_job

TASK_NAME = "dpsyn.run_job"
DEFAULT_QUEUE = "dpsyn"
TEST_FAKE_BACKEND_ENV = "DPSYN_TEST_FAKE_BACKEND"
TEST_FAKE_DELAY_ENV = "DPSYN_TEST_FAKE_BACKEND_DELAY_S"


def make_celery(settings: Settings) -> Celery:
    """A Celery app for ``settings.broker_url`` (no result backend: results live in the DB)."""
    if not settings.broker_url:
        raise ValueError("the Celery queue needs DPSYN_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    celery = Celery("dpsyn", broker=settings.broker_url, set_as_current=False)
    celery.conf.update(
        task_default_queue=DEFAULT_QUEUE,
        task_acks_late=True,  # run_job is idempotent; a lost worker's task is redelivered
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,  # jobs are long: never hold one back behind another
        broker_transport_options={"visibility_timeout": settings.job_timeout_s + 3600},
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
    )
    return celery


def make_provider(settings: Settings) -> BackendProvider:
    """The backend provider of a worker process (the model is built on the first job)."""
    if os.environ.get(TEST_FAKE_BACKEND_ENV) == "1":
        if settings.environment == "production":
            raise RuntimeError(f"{TEST_FAKE_BACKEND_ENV} is a test hook; unset it in production")
        delay_s = float(os.environ.get(TEST_FAKE_DELAY_ENV) or 0)
        if delay_s > 0:
            from tests.workers.slow_backend import SlowBackend

            return StaticProvider(SlowBackend(delay_s))
        from tests.synthesis.fake_backend import FakeBackend

        return StaticProvider(FakeBackend())
    return BackendProvider(
        settings.backend, model=settings.model, url=settings.vllm_url, dtype=settings.dtype
    )


class CeleryQueue:
    """:class:`~workers.queue.JobQueue` that sends the job ID to the Celery workers."""

    def __init__(self, celery: Celery, *, queue: str = DEFAULT_QUEUE) -> None:
        self.celery, self.queue = celery, queue

    def enqueue(self, job_id: str) -> None:
        self.celery.send_task(TASK_NAME, args=[job_id], queue=self.queue)


# --- the worker process ---------------------------------------------------------------------

settings = get_settings()
app = make_celery(settings) if settings.broker_url else Celery("dpsyn", set_as_current=False)
_provider: BackendProvider | None = None
_provider_lock = threading.Lock()


def provider() -> BackendProvider:
    """The one provider of this worker process, built on first use."""
    global _provider
    with _provider_lock:
        if _provider is None:
            _provider = make_provider(settings)
        return _provider


@app.task(name=TASK_NAME, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_job_task(job_id: str) -> None:
    """Run one job by ID (idempotent: a redelivered task finds the job finished)."""
    run_job(
        job_id,
        database_url=settings.database_url,
        provider=provider(),
        timeout_s=settings.job_timeout_s,
    )
