"""Leases of running jobs: the heartbeat that keeps one alive, the reaper that ends dead ones.

Without leases a job whose worker died (SIGKILL, OOM, a lost machine) stayed ``running`` until
Celery delivered its task again, after the broker's visibility timeout (hours), and a job
whose final write met a database outage stayed ``running`` for good. Now every attempt holds
a lease on its job row (owner and expiry, set when the job is claimed):

* :class:`Heartbeat` renews it every ``heartbeat_s`` from a thread of the attempt (one UPDATE
  by primary key), and stops when the attempt ends, so that an attempt that gave up lets its
  lease run out. A heartbeat that finds the lease gone (reaped, or taken over) tells the
  attempt to stop writing.
* :class:`Reaper` runs in every worker process and in the embedded server: every
  ``reaper_interval_s`` it ends the running jobs whose lease expired, through
  :func:`app.services.job_leases.reap_job` (failed, charged if they read the data, else released).
  It leaves alone the attempts its own process runs: they renew as soon as the database lets
  them. Once an hour it also drops the records past the retention period
  (``DPSYN_RECORD_RETENTION_DAYS``: :mod:`app.services.retention`), where one is set.

Queued jobs have their own watchman: :class:`Dispatcher`, run beside the reaper (and in every
API process), sends the task of a queued job again once its last send is older than a bound,
so that a task lost on its way to the queue strands no job (the outbox; see the class).

Expiry times come from the workers' clocks; they must agree to well within the lease
duration (NTP). The reaper's decision is made under the job's row lock and every later write
of the attempt it ended is fenced, so a worker that was merely slow finds its job finished
and stops without writing or charging again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Self

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.db.models import now
from app.db.session import session_scope
from app.services.job_leases import expired_job_ids, reap_job, redispatch_due, renew_lease
from app.services.retention import expire_records

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseConfig:
    """Lease timing; :meth:`from_settings` reads the ``DPSYN_*`` settings of the same names."""

    duration_s: float = 60.0
    heartbeat_s: float = 10.0
    reaper_interval_s: float = 15.0
    store_retry_s: float = 120.0  # how long an attempt retries storing its outcome
    alive_file: str | None = None  # touched on each lease renewal and reaper round
    retention_days: float | None = None  # records dropped this long after a dataset's last job

    def mark_alive(self) -> None:
        """Touch ``alive_file``: the worker's health signal (``dpsyn worker-health``).

        Celery's ping cannot answer while a solo-pool worker runs a job, so health comes
        from these threads instead: the reaper touches the file every round when idle or
        busy, the heartbeat every renewal while a job runs. Both need the database; a
        worker whose threads stop (hung interpreter, lost database) lets it grow old.
        """
        if self.alive_file:
            try:
                Path(self.alive_file).touch()
            except OSError as err:  # a health signal must never break the worker
                log.warning("cannot touch the alive file: %s", type(err).__name__)

    @classmethod
    def from_settings(cls, settings: Settings) -> LeaseConfig:
        return cls(
            duration_s=settings.lease_duration_s,
            heartbeat_s=settings.heartbeat_interval_s,
            reaper_interval_s=settings.reaper_interval_s,
            store_retry_s=settings.final_store_retry_s,
            alive_file=settings.worker_alive_file,
            retention_days=settings.record_retention_days,
        )

    def expiry(self) -> datetime:
        """When a lease taken or renewed now expires."""
        return now() + timedelta(seconds=self.duration_s)


def is_connection_error(err: BaseException) -> bool:
    """A failure to reach the database (worth retrying), not a failing statement."""
    if isinstance(err, OperationalError | InterfaceError):
        return True
    return isinstance(err, DBAPIError) and bool(err.connection_invalidated)


def new_owner() -> str:
    """A lease owner unique to one attempt: host and process (for operators), and a token."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


_live: set[str] = set()
_live_lock = threading.Lock()


def live_owners() -> frozenset[str]:
    """Leases held by attempts running in this process right now."""
    with _live_lock:
        return frozenset(_live)


class Heartbeat:
    """Renews one attempt's lease until the ``with`` block ends; ``lost`` is set once the
    lease is gone (the attempt must stop without writing)."""

    def __init__(self, database_url: str, job_id: str, owner: str, config: LeaseConfig) -> None:
        self.database_url, self.job_id, self.owner, self.config = (
            database_url,
            job_id,
            owner,
            config,
        )
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"dpsyn-heartbeat-{job_id[:8]}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        with _live_lock:
            _live.add(self.owner)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.config.heartbeat_s + 5)
        with _live_lock:
            _live.discard(self.owner)

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.config.heartbeat_s):
            try:
                with session_scope(self.database_url) as session:
                    renewed = renew_lease(session, self.job_id, self.owner, self.config.expiry())
            except Exception as err:  # keep beating: the database may come back in time
                if not failing:
                    log.warning(
                        "job %s: renewing its lease failed (%s); retrying every %g s",
                        self.job_id,
                        type(err).__name__,
                        self.config.heartbeat_s,
                    )
                failing = True
                continue
            if failing:
                log.info("job %s: lease renewed again", self.job_id)
                failing = False
            if renewed:
                self.config.mark_alive()
            else:
                log.warning("job %s: lost its lease (reaped or taken over)", self.job_id)
                self.lost.set()
                return


class _Periodic:
    """A daemon thread that runs :meth:`_round` every :meth:`_interval_s` seconds until
    closed. A round that fails (the database may be down) is logged once, by type only, and
    tried again next time: these threads must outlive any outage."""

    name = "dpsyn-periodic"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> Self:
        """Start the thread (idempotent)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        return self

    def close(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _round(self) -> None:
        raise NotImplementedError

    def _interval_s(self) -> float:
        raise NotImplementedError

    def _run(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self._round()
                failing = False
            except Exception as err:  # the database may be down: try again next round
                if not failing:
                    log.warning("%s: %s; retrying", self.name, type(err).__name__)
                failing = True
            self._stop.wait(self._interval_s())


#: How often a reaper drops the records past the retention period.
RETENTION_INTERVAL_S = 3600.0


class Reaper(_Periodic):
    """A daemon thread ending running jobs whose lease expired (see the module docstring).

    ``spare`` names jobs this process is about to run again itself (the embedded server's
    recovered jobs): their next attempt decides, as it always did, so that one that never
    read the data runs again rather than failing."""

    name = "dpsyn-reaper"

    def __init__(
        self,
        database_url: str,
        config: LeaseConfig,
        *,
        spare: Callable[[], Collection[str]] | None = None,
    ) -> None:
        super().__init__()
        self.database_url, self.config, self.spare = database_url, config, spare
        self._next_expiry = 0.0  # time.monotonic() of the next retention round

    def reap_once(self) -> list[str]:
        """End every job whose lease expired now; returns their IDs."""
        at = now()
        with session_scope(self.database_url) as session:
            due = expired_job_ids(session, at, exclude_owners=live_owners())
        spared = set(self.spare()) if self.spare is not None else set()
        reaped = []
        for job_id in due:
            if job_id in spared:
                continue
            with session_scope(self.database_url) as session:
                job = reap_job(session, job_id, at)
                if job is None:
                    continue
                status, touched, owner = job.status, job.touched_data, job.lease_owner
            reaped.append(job_id)
            log.warning(
                "job %s: lease of %s expired; %s, %s",
                job_id,
                owner,
                status,
                "charged (it had read the data)" if touched else "released",
            )
        return reaped

    def expire_once(self, at: datetime | None = None) -> list[str]:
        """Drop the records past the retention period (none without one); returns the IDs of
        their datasets."""
        days = self.config.retention_days
        if days is None:
            return []
        with session_scope(self.database_url) as session:
            dropped = expire_records(session, days, at=at)
        for dataset_id in dropped:
            log.info(
                "dataset %s: no job for %g days; records dropped, data key destroyed",
                dataset_id,
                days,
            )
        return dropped

    def _round(self) -> None:
        self.reap_once()
        self.config.mark_alive()
        if time.monotonic() >= self._next_expiry:  # hourly; a failed round waits its hour
            self._next_expiry = time.monotonic() + RETENTION_INTERVAL_S
            self.expire_once()

    def _interval_s(self) -> float:
        return self.config.reaper_interval_s


# --- the outbox's dispatcher --------------------------------------------------------------


@dataclass(frozen=True)
class DispatchConfig:
    """When a queued job's task is sent again: once its last send is ``after_s`` old
    (``DPSYN_REDISPATCH_AFTER_S``), looked for every quarter of that."""

    after_s: float = 60.0

    @property
    def interval_s(self) -> float:
        return self.after_s / 4

    @classmethod
    def from_settings(cls, settings: Settings) -> DispatchConfig:
        return cls(after_s=settings.redispatch_after_s)


class Dispatcher(_Periodic):
    """The outbox's sender: a daemon thread that sends the task of every queued job whose
    last send is older than the bound again, through ``send`` (the process's queue).

    Submission commits a job with its mark before it sends the task, so a task lost on its
    way (the API killed in between, Redis emptied or restarted without persistence) leaves a
    queued job with an old mark; one of the dispatchers (every worker and API process, and
    the embedded server) sends it again within ``after_s`` + ``interval_s``. A job that merely
    waits behind others longer than the bound gets one more copy per bound: the worker's
    claim makes every copy but the first do nothing (``workers.runner``). ``exclude`` names
    jobs the caller's own queue holds already (the embedded worker's)."""

    name = "dpsyn-dispatcher"

    def __init__(
        self,
        database_url: str,
        send: Callable[[str], None],
        config: DispatchConfig,
        *,
        exclude: Callable[[], Collection[str]] | None = None,
    ) -> None:
        super().__init__()
        self.database_url, self.send, self.config, self.exclude = (
            database_url,
            send,
            config,
            exclude,
        )

    def dispatch_once(self) -> list[str]:
        """Send every stale queued job's task again now; returns the IDs sent. The first send
        that fails (broker down) ends the round: the rest are tried again after the bound."""
        held = self.exclude() if self.exclude is not None else ()
        with session_scope(self.database_url) as session:
            due = redispatch_due(session, now(), after_s=self.config.after_s, exclude=held)
        sent: list[str] = []
        for job_id in due:
            try:
                self.send(job_id)
            except Exception as err:
                log.warning(
                    "job %s: sending its task again failed (%s); next try in %g s",
                    job_id,
                    type(err).__name__,
                    self.config.after_s,
                )
                break
            sent.append(job_id)
            log.info(
                "job %s: queued, its task last sent over %g s ago; sent again",
                job_id,
                self.config.after_s,
            )
        return sent

    def _round(self) -> None:
        self.dispatch_once()

    def _interval_s(self) -> float:
        return self.config.interval_s
