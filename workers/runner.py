"""Run one job by its ID: the body of the Celery task and of the in-process worker.

The steps are the same for every method; what runs in step 4 is the plan of the job's method,
whichever the registry (``app.methods.registry``) holds under the job's name: the runner never
branches on it. A method that reads a public dataset has its texts read in step 2 (public
texts are never charged).

A job runs in fenced steps, each its own transaction:

1. **Claim.** Lock the job row; return if it is already finished (a redelivered task must not
   charge twice or store a second prompt set; a job a reaper ended is finished), or if it is
   running under another attempt's live lease (a second copy of its task, such as the one
   the outbox's dispatcher sends for a job that waited longer than its bound). Otherwise
   mark it running, count the attempt and take the job's lease (``workers.lease``), which a
   heartbeat thread renews until the attempt ends. The attempt number is a fencing token:
   every later write checks it, so a stale delivery that lost the job to a newer one (or to
   a reaper) stops without writing anything.
2. **Prepare** without private data: rebuild the method's plan (``app.methods``) from what
   admission stored (it must describe exactly the reserved event), check the dataset, load
   the public texts of a method that reads some, and build the model backend.
   A failure here releases the reservation.
3. **Touch.** Set ``touched_data`` and commit *before* the first private record is read. From
   here on the job stays charged whatever happens: a failure or cancellation commits it.
4. **Run** the method's plan; when it reports progress (between units of its own: tokens,
   public inputs, steps), write the progress and check for cancellation (throttled).
5. **Store** the prompt set, mark the job succeeded and commit its charge, in one transaction.
6. **Validate** (only if the job names a validation set), after the private records are
   dropped: score the *stored* prompt on up to ``VALIDATION_MAX_RECORDS`` public labelled
   records with the one scorer and write the score to the prompt set (or ``not_scored`` and
   a reason). Post-processing of the DP output on public data: nothing is charged, and a
   failure here changes neither the job's status nor its prompt (``app.services.prompts``).
   It runs once the lease is released. A later delivery of a succeeded job whose score is
   still ``pending`` (its worker died in between) does this step only.

The final write (step 5, or recording a failure or cancellation) is retried through a
database outage, with backoff, for ``LeaseConfig.store_retry_s``; if the database stays
away longer the attempt gives up and ends, its heartbeat stops, and once the lease expires
a reaper settles the job (charged if it read the data). A progress write that meets an
outage is skipped: progress is advisory, and the mechanism keeps running.

A job found ``running`` with ``touched_data`` set and an expired lease (or ``take_over``: the
embedded server restarted) belongs to a worker that died after reading the data. Running it
again would run the mechanism twice for one charge, so it fails, charged.

Backend calls that fail transiently (a timeout, a lost connection, HTTP 429 or 5xx: a
:class:`~app.llm.base.TransientBackendError`) are retried with exponential backoff inside the
same run, by :mod:`app.llm.retry` (the only retry layer; a final error such as HTTP 400 fails
at once): the call is deterministic in its inputs, so a retry does not change what the
mechanism releases. Nothing here logs or stores record text or prompts; errors of unknown
kind are reported by type name only, and a backend's failure by a code, a fixed sentence and
its HTTP status, never its message (model servers quote their input in errors). A method's
own error (:data:`OWN_MESSAGE`: a plug-in's too) is recorded with its message only once that
message passed the record-text check against the job's private records
(:mod:`app.synthesis.record_text`); one that quotes a record is recorded, shown and logged as
withheld.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import (
    TERMINAL_STATUSES,
    Dataset,
    DatasetRecord,
    Job,
    JobStatus,
    PromptSet,
    now,
)
from app.db.session import session_scope
from app.llm.base import BackendError, LLMBackend, TransientBackendError
from app.llm.provider import BackendProvider
from app.llm.retry import RetryingBackend, RetryPolicy
from app.methods.registry import get_method
from app.privacy.calibration import CalibrationError
from app.privacy.events import to_dict
from app.results import Progress, SynthesisError, SynthesisResult
from app.services.datasets import load_public_texts, load_records
from app.services.errors import ServiceError
from app.services.job_leases import lease_live
from app.services.jobs import close_job, store_result
from app.services.prompts import (
    PromptSource,
    ValidationUnavailableError,
    load_validation_records,
    record_validation,
    score_prompt,
    validation_is_final,
)
from app.services.record_reads import Reader, ReaderKind
from app.services.rows import stored_plan
from app.synthesis.data import Record
from app.synthesis.record_text import RecordText
from app.synthesis.scoring import ScoringError
from app.synthesis.tasks import TaskError, TaskSpec
from workers.lease import Heartbeat, LeaseConfig, is_connection_error, new_owner

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # deliveries that may start a job before it is given up (before touching data)
# The backend failed (described by _describe_backend, never by its message). Only a
# TransientBackendError among them is retried, by app.llm.retry: see RetryingBackend below.
BACKEND_FAILURES = (BackendError, httpx.HTTPError)

T = TypeVar("T")


class JobCancelled(Exception):  # noqa: N818 (a signal, not an error)
    """The job's ``cancel_requested`` flag was set; raised between progress units."""


class JobSupersededError(Exception):
    """A newer attempt owns the job, or it was finished elsewhere: stop without writing."""


class WorkerStoppingError(Exception):
    """The worker is shutting down (embedded server stopping)."""


class JobTimeoutError(Exception):
    """The job ran longer than the configured limit."""


class NotRunnableError(Exception):
    """The job cannot start; raised before it touches the data. One safe line."""


class OutcomeNotStoredError(Exception):
    """The database stayed unreachable for the whole retry budget: the outcome is lost and
    the job is left to its lease (a reaper settles it once the database is back)."""


class DatabaseUnavailableError(Exception):
    """The job could not even be claimed (it stays queued): the caller may try again later."""


# Failures whose message is safe and whose stack trace is of no interest.
EXPECTED = (NotRunnableError, JobTimeoutError, *BACKEND_FAILURES)
# Failures recorded with their own message (PateError is a SynthesisError), once it passed
# the record-text check: method code raises them, a plug-in's as much as ours, so what the
# message says is the method author's choice and is checked, not trusted.
OWN_MESSAGE = (NotRunnableError, SynthesisError, CalibrationError, TaskError, ScoringError)


@dataclass(frozen=True)
class _Claim:
    """The claimed job (a detached row) and its dataset's task, read under the row lock."""

    attempt: int
    job: Job
    task: dict[str, Any] | None  # None: the dataset is gone or deleted


@dataclass(frozen=True)
class _Work:
    """A prepared job: what step 4 runs on the private records, and what to check first."""

    planned: int  # progress total, in the method's unit (``MethodPlan.progress_total``)
    run: Callable[[list[Record], LLMBackend, Progress], SynthesisResult]
    check_backend: Callable[[LLMBackend], None]  # raises if the job cannot run on it


def run_job(
    job_id: str,
    *,
    database_url: str,
    provider: BackendProvider,
    retry: RetryPolicy | None = None,
    progress_interval_s: float = 0.5,
    timeout_s: float | None = None,
    stop: threading.Event | None = None,
    lease: LeaseConfig | None = None,
    sleep: Callable[[float], None] = time.sleep,
    take_over: bool = False,
) -> None:
    """Run job ``job_id`` to a final state; safe to call again with the same ID.

    ``progress_interval_s`` throttles progress writes and cancellation checks (both are one
    small transaction); ``timeout_s`` fails a job that runs longer; ``stop`` interrupts it
    between progress units (failed, charged, if it had read the data; else queued again);
    ``lease`` times the attempt's lease and how long its final write is retried (``sleep``
    waits between those retries). ``take_over``: the caller knows that no other attempt of the job
    is alive (the embedded server's previous process left it), so a lease that has not
    expired yet is taken over instead of left to its holder. Raises
    :class:`DatabaseUnavailableError` if the job could not be claimed within that time (it
    is still queued).
    """
    lease = lease or LeaseConfig()
    owner = new_owner()
    fence = _Fence(database_url, job_id, 0, owner, lease, sleep)
    try:
        claim = fence.durably(
            lambda: _claim(database_url, job_id, owner, lease, take_over), "claiming it"
        )
    except OutcomeNotStoredError:
        raise DatabaseUnavailableError(
            f"job {job_id}: the database was unreachable for {lease.store_retry_s:g} s"
        ) from None
    if claim is None:
        _finish_pending_validation(job_id, database_url, provider, retry or RetryPolicy())
        return
    fence.attempt = claim.attempt
    succeeded = False
    with Heartbeat(database_url, job_id, owner, lease) as heartbeat:
        try:
            succeeded = _attempt(
                claim,
                fence,
                provider=provider,
                retry=retry or RetryPolicy(),
                progress_interval_s=progress_interval_s,
                timeout_s=timeout_s,
                stop=stop,
                lost=heartbeat.lost,
            )
        except OutcomeNotStoredError:
            log.error(
                "job %s: could not store its outcome within %g s (database unreachable); its "
                "lease will expire and a reaper will settle it",
                job_id,
                lease.store_retry_s,
            )
    if succeeded:  # step 6, past the lease: the job is final, its heartbeat has stopped
        _validate(claim.job, database_url, provider, retry or RetryPolicy(), owner)


def _attempt(
    claim: _Claim,
    fence: _Fence,
    *,
    provider: BackendProvider,
    retry: RetryPolicy,
    progress_interval_s: float,
    timeout_s: float | None,
    stop: threading.Event | None,
    lost: threading.Event,
) -> bool:
    """Steps 2 to 5 of a claimed job, and recording how it ended; True if it succeeded."""
    job_id, database_url = claim.job.id, fence.database_url
    started = time.monotonic()
    # The private records while step 4 runs: a failure's message is checked against them
    # (_describe). Empty before they are loaded, and again once the run returned.
    records: list[Record] = []
    try:
        if claim.job.cancel_requested:
            raise JobCancelled
        work = _prepare(claim, database_url, fence.reader())
        context = f"job {job_id}"
        backend = RetryingBackend(
            retry.call(provider.get, what="building the backend", context=context),
            lock=provider.use_lock,
            retry=retry,
            context=context,
        )
        if stop is not None and stop.is_set():
            raise WorkerStoppingError
        work.check_backend(backend)  # e.g. PromptDPSGD on vLLM: fail before touching data
        fence.touch(planned=work.planned)
        records = _load_records(database_url, claim.job.dataset_id, fence.reader())
        progress = _ProgressWriter(
            fence,
            interval_s=progress_interval_s,
            deadline=None if timeout_s is None else started + timeout_s,
            stop=stop,
            lost=lost,
        )
        result = work.run(records, backend, progress)
        records = []  # dropped: what is stored from here on is the run's DP output
        fence.succeed(result)
        log.info("job %s: succeeded in %.1f s", job_id, time.monotonic() - started)
        return True
    except JobSupersededError:
        log.info("job %s: superseded by another attempt; stopping without writing", job_id)
    except OutcomeNotStoredError:
        raise  # the outcome is known but the database is not there: left to the lease
    except JobCancelled:
        try:
            fence.finish(JobStatus.CANCELLED, None)
            log.info("job %s: cancelled", job_id)
        except JobSupersededError:
            log.info("job %s: superseded by another attempt; not recording it", job_id)
    except WorkerStoppingError:
        try:
            fence.interrupt(_describe(WorkerStoppingError(), job_id, timeout_s))
        except JobSupersededError:
            log.info("job %s: superseded by another attempt; not recording it", job_id)
    except Exception as err:  # every failure ends the job; the ledger decides the charge
        message = _describe(err, job_id, timeout_s, records)
        del records  # nothing below needs them
        _log_failure(err, job_id, message)
        try:
            fence.finish(JobStatus.FAILED, message)
        except JobSupersededError:
            log.info("job %s: superseded by another attempt; not recording the failure", job_id)
    return False


def _describe(
    err: Exception, job_id: str, timeout_s: float | None, records: Sequence[Record] = ()
) -> str:
    """A one-line error for the job's record, the API and the log: never record text or
    prompts.

    An error of :data:`OWN_MESSAGE` keeps its message unless it quotes one of ``records``,
    the job's private records (:class:`~app.synthesis.record_text.RecordText`, built here on
    the failure path only: the success path pays nothing); then it is
    :data:`~app.synthesis.record_text.WITHHELD`. ``records`` is empty where none is at hand:
    before step 3 loads them (the plan is rebuilt and the backend checked without them, so
    a message raised then cannot quote one), and in step 6, whose scorer reads the stored
    DP prompt and public validation records only.
    """
    if isinstance(err, BACKEND_FAILURES):
        return _describe_backend(err)
    if isinstance(err, JobTimeoutError):
        return f"the job ran longer than the limit of {timeout_s:g} s"
    if isinstance(err, WorkerStoppingError):
        return "the worker stopped while the job was running"
    if isinstance(err, OWN_MESSAGE):
        message = str(err)
        return RecordText.of(records).scrub(message) if records else message
    return f"internal error ({type(err).__name__}) in job {job_id}; see the worker log"


def _log_failure(err: Exception, job_id: str, message: str) -> None:
    """The worker log's line for a failed job: ``message`` (:func:`_describe`'s: a method's
    own message once checked for record text, else our words), and for an error that is not
    :data:`EXPECTED` where it was raised (file, line, function: code, not data). Never an
    exception's message unchecked."""
    if isinstance(err, EXPECTED):
        log.warning("job %s: failed: %s", job_id, message)
        return
    where = " <- ".join(
        f"{frame.filename}:{frame.lineno} in {frame.name}"
        for frame in reversed(traceback.extract_tb(err.__traceback__))
    )
    if isinstance(err, OWN_MESSAGE):
        log.error("job %s: failed with %s at %s: %s", job_id, type(err).__name__, where, message)
    else:
        log.error("job %s: failed with %s at %s", job_id, type(err).__name__, where)


def _validate(
    job: Job,
    database_url: str,
    provider: BackendProvider,
    retry: RetryPolicy,
    owner: str | None = None,
) -> None:
    """Step 6: score the stored prompt on the job's validation set and record the outcome.

    Runs after the job succeeded and its private records were dropped: the scorer gets the
    stored prompt (a DP output) and public labelled records only. Never raises: a failure is
    recorded as ``not_scored`` with a reason naming no record (:func:`_validation_reason`),
    and one that cannot even be recorded is logged; the job and its prompt stay as stored.
    """
    if job.validation_dataset_id is None:
        return
    prompt_id: str | None = None
    try:
        with session_scope(database_url) as session:
            row = session.scalars(select(PromptSet).where(PromptSet.job_id == job.id)).one()
            prompt_id, source = row.id, PromptSource.from_row(row)
            reader = Reader.of(ReaderKind.VALIDATION, job.id, owner)
            records = load_validation_records(session, job.validation_dataset_id, reader)
        outcome = score_prompt(source, records, provider, retry)
    except Exception as err:
        outcome = {"reason": _validation_reason(err, job.id)}
    if prompt_id is None:
        log.warning("job %s: its prompt could not be read to score it", job.id)
        return
    try:
        with session_scope(database_url) as session:
            record_validation(session, prompt_id, outcome)
    except Exception as err:
        log.warning("job %s: its validation score was not stored (%s)", job.id, type(err).__name__)
        return
    log.info("job %s: validation %s", job.id, "not scored" if "reason" in outcome else "scored")


def _finish_pending_validation(
    job_id: str, database_url: str, provider: BackendProvider, retry: RetryPolicy
) -> None:
    """Another delivery of a succeeded job whose worker stopped between storing the prompt
    and scoring it (step 6 left ``pending``): score it now. Nothing else of the job is run
    or written; a score written meanwhile by another worker is kept (written once). Its read
    of the validation set is recorded under this process (host:pid): it holds no lease."""
    try:
        with session_scope(database_url) as session:
            job = session.get(Job, job_id)
            row = session.scalars(select(PromptSet).where(PromptSet.job_id == job_id)).first()
            pending = (
                job is not None
                and job.status == JobStatus.SUCCEEDED
                and row is not None
                and not validation_is_final(row.validation)
            )
            if pending:
                session.expunge(job)
    except Exception as err:  # a redelivery's extra; the job itself is final
        log.warning("job %s: could not check its validation (%s)", job_id, type(err).__name__)
        return
    if pending:
        assert job is not None
        _validate(job, database_url, provider, retry)


def _validation_reason(err: Exception, job_id: str) -> str:
    """Why a prompt was not scored, in our own words: the messages of our refusals (they
    name datasets, labels and models, never a record) or :func:`_describe`'s line (a
    backend failure by code, a scorer's refusal by labels, anything else by type name)."""
    if isinstance(err, ServiceError):
        return err.message
    if isinstance(err, ValidationUnavailableError):
        return str(err)
    return _describe(err, job_id, None)


def _describe_backend(err: BackendError | httpx.HTTPError) -> str:
    """A backend failure as a code and a fixed sentence, with the HTTP status if there was one.

    Never the exception's message, nor anything it was raised from: a model server quotes
    its input in errors (a prompt, whole or cut, escaped, as token ids) and a backend may pass
    that on, so only the type and :attr:`BackendError.status` are read (docs/service.md).
    """
    status = err.status if isinstance(err, BackendError) else None
    http = f" (HTTP {status})" if isinstance(status, int) else ""
    if isinstance(err, TransientBackendError | httpx.TransportError):
        if http:
            return f"backend_unavailable: the model server did not answer after the retries{http}"
        return (
            "backend_unreachable: the model server could not be reached "
            "(timeout or lost connection)"
        )
    if http:
        return f"backend_rejected: the model server refused the request{http}"
    return f"backend_failed: the model backend could not answer ({type(err).__name__})"


def _claim(
    database_url: str, job_id: str, owner: str, lease: LeaseConfig, take_over: bool
) -> _Claim | None:
    """Lock the job, mark it running under ``owner``'s lease, or return None if there is
    nothing to do."""
    with session_scope(database_url) as session:
        job = _locked_job(session, job_id)
        if job is None:
            log.warning("job %s: no such job; nothing to run", job_id)
            return None
        if job.status in TERMINAL_STATUSES:
            log.info("job %s: already %s; nothing to do", job_id, job.status)
            return None
        if not take_over and lease_live(job, now()):  # another copy of its task runs it
            log.info(
                "job %s: running under the live lease of %s; nothing to do",
                job_id,
                job.lease_owner,
            )
            return None
        if job.status == JobStatus.RUNNING and job.touched_data:
            close_job(
                session,
                job,
                status=JobStatus.FAILED,
                error="the worker running this job stopped after it had read the private data; "
                "its charge stands (submit a new job)",
            )
            log.warning("job %s: interrupted after touching the data; failed, charged", job_id)
            return None
        if job.attempts >= MAX_ATTEMPTS:
            close_job(
                session,
                job,
                status=JobStatus.FAILED,
                error=f"the job was started {job.attempts} times without finishing",
            )
            log.warning("job %s: too many attempts; failed", job_id)
            return None
        job.status = JobStatus.RUNNING.value
        job.started_at = now()
        job.attempts += 1
        job.lease_owner, job.lease_expires_at = owner, lease.expiry()
        session.flush()
        dataset = session.get(Dataset, job.dataset_id)
        task = dict(dataset.task) if dataset is not None and dataset.deleted_at is None else None
        claim = _Claim(job.attempts, job, task)
    log.info("job %s: started (attempt %d)", job_id, claim.attempt)
    return claim


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def _prepare(claim: _Claim, database_url: str, reader: Reader) -> _Work:
    """The job's plan as admission stored it, checked to still describe the reservation; and
    the public texts of a method that reads some (never charged, so read before the job
    touches data)."""
    if claim.task is None:
        raise NotRunnableError("the dataset was deleted before the job started")
    job = claim.job
    try:
        task = TaskSpec.model_validate(claim.task)
        plan = get_method(job.method).rebuild(task, stored_plan(job))
    except (KeyError, TypeError, AttributeError, ValueError):
        raise NotRunnableError("the job's stored configuration is invalid") from None
    if _canonical(to_dict(plan.event())) != _canonical(job.event):
        raise NotRunnableError("the job's stored plan does not match the privacy event it reserved")
    expected = plan.public_records
    texts = _load_public_texts(database_url, job, expected, reader) if expected is not None else []
    return _Work(
        planned=plan.progress_total,
        run=lambda records, backend, progress: plan.run(records, backend, progress, texts),
        check_backend=plan.check_backend,
    )


def _load_public_texts(database_url: str, job: Job, expected: int, reader: Reader) -> list[str]:
    """A job's public texts, checked against the count it was admitted for (the read
    recorded as the job's)."""
    with session_scope(database_url) as session:
        dataset = session.get(Dataset, job.public_dataset_id) if job.public_dataset_id else None
        if dataset is None or dataset.deleted_at is not None:
            raise NotRunnableError("the public dataset was deleted before the job started")
        texts = load_public_texts(session, dataset.id, reader)
    if len(texts) != expected:
        raise NotRunnableError(
            f"the public dataset has {len(texts)} records but the job was admitted for {expected}"
        )
    return texts


def _load_records(database_url: str, dataset_id: str, reader: Reader) -> list[Record]:
    """The job's private records, the read recorded first (a read that cannot be recorded
    fails the job before any record is opened)."""
    with session_scope(database_url) as session:
        return load_records(session, dataset_id, reader)


def _locked_job(session: Session, job_id: str) -> Job | None:
    return session.scalars(
        select(Job)
        .where(Job.id == job_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


class _Fence:
    """Writes of one attempt, each under the job's row lock and only while it owns the job."""

    def __init__(
        self,
        database_url: str,
        job_id: str,
        attempt: int,
        owner: str,
        lease: LeaseConfig,
        sleep: Callable[[float], None],
    ) -> None:
        self.database_url, self.job_id, self.attempt = database_url, job_id, attempt
        self.owner, self.lease, self.sleep = owner, lease, sleep

    def reader(self) -> Reader:
        """The attempt as a reader of records: the job, by the worker its lease names."""
        return Reader.of(ReaderKind.JOB, self.job_id, self.owner)

    def durably(self, write: Callable[[], T], what: str = "storing its outcome") -> T:
        """Run ``write`` (one transaction), retried with backoff while the database is
        unreachable, for at most ``lease.store_retry_s``; then :class:`OutcomeNotStoredError`.
        Errors of any other kind are raised at once."""
        deadline = time.monotonic() + self.lease.store_retry_s
        delay = 0.25
        while True:
            try:
                return write()
            except Exception as err:
                if not is_connection_error(err):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OutcomeNotStoredError from None
                wait = min(delay, left, 5.0)
                log.warning(
                    "job %s: %s failed (%s); retry in %.2f s",
                    self.job_id,
                    what,
                    type(err).__name__,
                    wait,
                )
                self.sleep(wait)
                delay *= 2

    def _owned(self, session: Session, *, lock: bool, done: JobStatus | None = None) -> Job | None:
        """The job if this attempt still runs it; None if this attempt already left it
        ``done`` (a commit whose reply was lost in an outage, then retried)."""
        if lock:
            job = _locked_job(session, self.job_id)
        else:
            job = session.get(Job, self.job_id, populate_existing=True)
        if job is None or job.attempts != self.attempt:
            raise JobSupersededError
        if done is not None and job.status == done and job.lease_owner == self.owner:
            return None
        if job.status != JobStatus.RUNNING:
            raise JobSupersededError
        return job

    def _running(self, session: Session, *, lock: bool) -> Job:
        job = self._owned(session, lock=lock)
        assert job is not None
        return job

    def touch(self, *, planned: int) -> None:
        """Mark the job as having read the data, committed before the first record is read.

        The dataset must hold the records it was uploaded with (its row's count): a job is
        planned from counts of those records, released or declared public, and the message
        of a refusal names no count (``app.privacy.unit``)."""
        with session_scope(self.database_url) as session:
            job = self._running(session, lock=True)
            if job.cancel_requested:
                raise JobCancelled
            dataset = session.get(Dataset, job.dataset_id)
            count = session.scalar(
                select(func.count())
                .select_from(DatasetRecord)
                .where(DatasetRecord.dataset_id == job.dataset_id)
            )
            if dataset is None or count != dataset.record_count:
                raise NotRunnableError(
                    "the dataset's records changed since the job was admitted; submit it again"
                )
            job.touched_data = True
            job.progress_done, job.progress_total = 0, planned

    def progress(self, done: int, total: int) -> None:
        """Record progress; raises :class:`JobCancelled` if a cancellation was requested."""
        with session_scope(self.database_url) as session:
            job = self._running(session, lock=False)
            if job.cancel_requested:
                raise JobCancelled
            job.progress_done, job.progress_total = done, total

    def succeed(self, result: SynthesisResult) -> None:
        """Step 5, retried through a database outage (see :meth:`durably`)."""

        def store() -> None:
            with session_scope(self.database_url) as session:
                job = self._owned(session, lock=True, done=JobStatus.SUCCEEDED)
                if job is not None:
                    store_result(session, job, result)

        self.durably(store)

    def interrupt(self, error: str) -> None:
        """The worker is stopping: back to the queue if the data was not read, else failed."""

        def write() -> None:
            with session_scope(self.database_url) as session:
                job = self._running(session, lock=True)
                if job.touched_data:
                    close_job(session, job, status=JobStatus.FAILED, error=error)
                else:
                    job.status, job.started_at = JobStatus.QUEUED.value, None
                    job.lease_owner, job.lease_expires_at = None, None

        self.durably(write)
        log.info("job %s: interrupted by the worker stopping", self.job_id)

    def finish(self, status: JobStatus, error: str | None) -> None:
        """Record a failure or cancellation, retried through a database outage."""

        def write() -> None:
            with session_scope(self.database_url) as session:
                job = self._owned(session, lock=True, done=status)
                if job is not None:
                    close_job(session, job, status=status, error=error)

        self.durably(write)


class _ProgressWriter:
    """The progress callback: throttled writes, cancellation, deadline, stop and lease checks.

    A write that cannot reach the database is skipped (progress is advisory; cancellation is
    seen at the next write that gets through)."""

    def __init__(
        self,
        fence: _Fence,
        *,
        interval_s: float,
        deadline: float | None,
        stop: threading.Event | None,
        lost: threading.Event,
    ) -> None:
        self.fence, self.interval_s, self.deadline, self.stop = fence, interval_s, deadline, stop
        self.lost = lost
        self.last = time.monotonic()
        self.failing = False

    def __call__(self, done: int, total: int) -> None:
        if self.lost.is_set():
            raise JobSupersededError
        if self.stop is not None and self.stop.is_set():
            raise WorkerStoppingError
        clock = time.monotonic()
        if self.deadline is not None and clock > self.deadline:
            raise JobTimeoutError
        if clock - self.last < self.interval_s and done < total:
            return
        self.last = clock
        try:
            self.fence.progress(done, total)
        except Exception as err:
            if not is_connection_error(err):
                raise
            if not self.failing:
                log.warning(
                    "job %s: recording progress failed (%s); the job goes on",
                    self.fence.job_id,
                    type(err).__name__,
                )
            self.failing = True
            return
        self.failing = False
