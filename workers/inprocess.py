"""The embedded deployment's job queue: one background thread in the API process.

One thread, because there is one local model and its forward passes are serialised anyway.
On start it picks up the jobs a previous process left ``queued`` or ``running`` (an embedded
server that was stopped or crashed); :func:`workers.runner.run_job` decides what each needs:
a queued job runs, a running one that had read the data fails, charged. Beside it runs the
lease reaper (``workers.lease``), which settles a job whose attempt gave up storing its outcome
through a database outage, once the lease expired, and the outbox's dispatcher, which puts back
a queued job this process does not hold (its claim met a database outage, or another process
admitted it) once its last send is older than the bound.
"""

from __future__ import annotations

import logging
import queue
import threading

from sqlalchemy import select
from sqlalchemy.exc import OperationalError, ProgrammingError

from app.db.models import ACTIVE_STATUSES, Job
from app.db.session import session_scope
from app.llm.provider import BackendProvider
from workers.lease import DispatchConfig, Dispatcher, LeaseConfig, Reaper
from workers.runner import DatabaseUnavailableError, RetryPolicy, run_job

log = logging.getLogger(__name__)

_STOP = object()


class InProcessQueue:
    """:class:`~app.services.queue.JobQueue` running jobs one at a time in a daemon thread."""

    def __init__(
        self,
        *,
        database_url: str,
        provider: BackendProvider,
        timeout_s: float | None = None,
        progress_interval_s: float = 0.5,
        retry: RetryPolicy | None = None,
        lease: LeaseConfig | None = None,
        dispatch: DispatchConfig | None = None,
    ) -> None:
        self.database_url, self.provider = database_url, provider
        self.timeout_s, self.progress_interval_s, self.retry = timeout_s, progress_interval_s, retry
        self.lease = lease or LeaseConfig()
        self._recovered: set[str] = set()  # re-enqueued at start, not run yet
        self._held: set[str] = set()  # in the in-memory queue, not run yet
        self.reaper = Reaper(database_url, self.lease, spare=lambda: frozenset(self._recovered))
        self.dispatcher = Dispatcher(
            database_url,
            self._put,
            dispatch or DispatchConfig(),
            exclude=lambda: frozenset(self._held),
        )
        self._queue: queue.Queue[object] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, *, recover: bool = True) -> InProcessQueue:
        """Start the worker thread, the reaper and the dispatcher (idempotent), first
        enqueueing unfinished jobs."""
        with self._lock:
            if self._thread is not None:
                return self
            if recover:
                for job_id in self.unfinished_jobs():
                    log.info("job %s: left unfinished by a previous process; re-enqueued", job_id)
                    self._recovered.add(job_id)
                    self._put(job_id)
            self._thread = threading.Thread(target=self._work, name="dpsyn-worker", daemon=True)
            self._thread.start()
            self.reaper.start()
            self.dispatcher.start()
        return self

    def unfinished_jobs(self) -> list[str]:
        """Jobs left queued or running; none on a database not migrated yet (a fresh one)."""
        try:
            with session_scope(self.database_url) as session:
                return list(
                    session.scalars(
                        select(Job.id)
                        .where(Job.status.in_(sorted(s.value for s in ACTIVE_STATUSES)))
                        .order_by(Job.created_at)
                    )
                )
        except (OperationalError, ProgrammingError) as err:
            log.info("in-process worker: no jobs to recover (%s)", type(err).__name__)
            return []

    def enqueue(self, job_id: str) -> None:
        if self._stop.is_set():
            raise RuntimeError("the in-process worker is stopped")
        self._put(job_id)
        self.start(recover=False)  # enqueueing into a queue nobody started still runs the job

    def _put(self, job_id: str) -> None:
        self._held.add(job_id)
        self._queue.put(job_id)

    def pending(self) -> int:
        """Jobs waiting (not counting the one running)."""
        return self._queue.qsize()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every enqueued job was run; True if the queue drained in time."""
        done = threading.Event()

        def _wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=_wait, daemon=True).start()
        return done.wait(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the thread: the running job stops at its next token (failed if it had read
        the data, else queued again for the next start); waiting jobs stay queued."""
        self._stop.set()
        self._queue.put(_STOP)
        self.reaper.close()
        self.dispatcher.close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP or self._stop.is_set():
                self._queue.task_done()
                self._drain()
                return
            try:
                assert isinstance(item, str)
                run_job(
                    item,
                    database_url=self.database_url,
                    provider=self.provider,
                    retry=self.retry,
                    progress_interval_s=self.progress_interval_s,
                    timeout_s=self.timeout_s,
                    stop=self._stop,
                    lease=self.lease,
                    take_over=item in self._recovered,  # its previous process is gone
                )
            except DatabaseUnavailableError:  # still queued; the next start picks it up
                log.error("in-process worker: job %s could not be claimed (database down)", item)
            except Exception as err:  # keep the worker alive; run_job already logged safely
                log.error("in-process worker: job %s raised %s", item, type(err).__name__)
            finally:
                self._recovered.discard(item)  # its attempt has claimed (and decided) it
                self._held.discard(item)
                self._queue.task_done()

    def _drain(self) -> None:
        """Forget what is waiting: those jobs stay queued in the database for the next start."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
            self._queue.task_done()
