"""The Celery app of the distributed deployment: API processes enqueue, workers run jobs.

Start a worker with ``dpsyn worker`` (or ``celery -A workers.celery_app worker``); settings
come from ``DPSYN_*`` variables, the broker from ``DPSYN_BROKER_URL``. Tasks carry only a job
ID and :func:`workers.runner.run_job` is idempotent, so late acknowledgement is safe: a task
whose worker died is delivered again, and the runner decides from the job row what to do. The
Redis visibility timeout is longer than the longest job, so a job still running is never
delivered a second time. A worker that dies mid-job is not waited for: its job's lease
expires and the reaper thread every worker process runs (started when the worker is ready)
fails it within ``DPSYN_LEASE_DURATION_S`` + ``DPSYN_REAPER_INTERVAL_S``; the task delivered
again hours later finds the job finished and does nothing.

A task can also be lost before any worker sees it: the API killed between committing a job
and sending its task, or Redis emptied (restarted without persistence). Beside the reaper,
every worker (and every API process, through :meth:`CeleryQueue.start_dispatcher`) runs the
outbox's dispatcher (``workers.lease.Dispatcher``), which sends the task of a job still
queued again once its last send is ``DPSYN_REDISPATCH_AFTER_S`` old; a copy that finds the
job running under a live lease, or finished, does nothing.

Test hook: ``DPSYN_TEST_FAKE_BACKEND=1`` makes the worker use the deterministic fake backend
(:mod:`app.llm.fake`, which the test suite uses too) instead of a model, slowed down by
``DPSYN_TEST_FAKE_BACKEND_DELAY_S`` seconds per model call if set (so that a fault test can
kill the worker mid-job). Both are read only here, only by the test suite's end-to-end tests,
and refused in production.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from sqlalchemy.orm import sessionmaker

from app.db import record_keys
from app.db.session import get_engine
from app.llm.fake import FakeBackend, SlowBackend
from app.llm.provider import BackendProvider, StaticProvider, provider_for
from app.log_redaction import describe_exception, install_log_redaction
from app.methods.registry import import_method_modules
from app.services.advice import AdviceRunner
from app.settings import Settings, get_settings
from workers.lease import DispatchConfig, Dispatcher, LeaseConfig, Reaper
from workers.runner import DatabaseUnavailableError, run_job

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
        return StaticProvider(SlowBackend(delay_s) if delay_s > 0 else FakeBackend())
    return provider_for(settings)


class CeleryQueue:
    """:class:`~app.services.queue.JobQueue` that sends the job ID to the Celery workers."""

    def __init__(self, celery: Celery, *, queue: str = DEFAULT_QUEUE) -> None:
        self.celery, self.queue = celery, queue
        self.dispatcher: Dispatcher | None = None

    def enqueue(self, job_id: str) -> None:
        self.celery.send_task(TASK_NAME, args=[job_id], queue=self.queue)

    def start_dispatcher(self, database_url: str, config: DispatchConfig) -> CeleryQueue:
        """Run the outbox's dispatcher for ``database_url`` through this queue (idempotent):
        what an API process does beside sending the tasks of the jobs it admits."""
        if self.dispatcher is None:
            self.dispatcher = Dispatcher(database_url, self.enqueue, config).start()
        return self

    def close(self) -> None:
        """Stop the dispatcher, if one runs."""
        if self.dispatcher is not None:
            self.dispatcher.close()


# --- the worker process ---------------------------------------------------------------------

install_log_redaction()  # exception messages can quote private records: types and places only
logger = logging.getLogger(__name__)
settings = get_settings()
import_method_modules(settings.method_module_names())  # the plug-ins the API admits
record_keys.configure_from(settings)  # the API's key folder
app = make_celery(settings) if settings.broker_url else Celery("dpsyn", set_as_current=False)
lease = LeaseConfig.from_settings(settings)
reaper = Reaper(settings.database_url, lease)
resend = CeleryQueue(app)  # its queue: the one this worker consumes, set when it is ready
_provider: BackendProvider | None = None
_provider_lock = threading.Lock()
CLAIM_RETRY_S = 60  # a task whose job could not be claimed (database down) is sent again


def consumed_queue(celery: Celery) -> str:
    """The queue this worker consumes (``dpsyn worker --queue``), where its dispatcher sends
    copies: the default one if it is among several."""
    names = list(celery.amqp.queues.consume_from or {DEFAULT_QUEUE: None})
    return DEFAULT_QUEUE if DEFAULT_QUEUE in names else names[0]


class _LazyProvider:
    """This process's provider, built when the advice runner first needs it."""

    def get(self) -> Any:
        return provider().get()

    @property
    def use_lock(self) -> Any:
        return provider().use_lock


# Advice runs (app.services.advice) are queued work: when the API does not run them (a
# broker is configured), every worker runs them beside its jobs, one at a time.
advice = AdviceRunner(
    sessionmaker(bind=get_engine(settings.database_url), expire_on_commit=False),
    _LazyProvider(),  # type: ignore[arg-type]
)


@worker_ready.connect
def _start_reaper(**_: Any) -> None:
    reaper.start()
    resend.queue = consumed_queue(app)
    resend.start_dispatcher(settings.database_url, DispatchConfig.from_settings(settings))
    if not settings.api_runs_advice():
        advice.start()


@worker_shutdown.connect
def _stop_reaper(**_: Any) -> None:
    reaper.close()
    resend.close()
    advice.stop()


@worker_process_init.connect
def _forget_parent_connections(**_: Any) -> None:
    """A prefork child must not use the pooled connections it inherited from its parent."""
    get_engine(settings.database_url).dispose(close=False)


def provider() -> BackendProvider:
    """The one provider of this worker process, built on first use."""
    global _provider
    with _provider_lock:
        if _provider is None:
            _provider = make_provider(settings)
        return _provider


@app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_job_task(self: Task, job_id: str) -> None:
    """Run one job by ID (idempotent: a redelivered task finds the job finished). A job that
    could not be claimed because the database is down is still queued: try again later."""
    try:
        run_job(
            job_id,
            database_url=settings.database_url,
            provider=provider(),
            timeout_s=settings.job_timeout_s,
            lease=lease,
        )
    except DatabaseUnavailableError:
        raise self.retry(
            countdown=CLAIM_RETRY_S, max_retries=None, exc=DatabaseUnavailableError()
        ) from None
    except Exception as err:
        # Celery would log the exception's text as a plain string (out of reach of the log
        # redaction). The runner has recorded what it could; the job's lease settles the rest.
        logger.error("job %s: task failed: %s", job_id, describe_exception(err))
