"""Synthesis jobs: submission with budget admission, cancellation, and their outcomes.

Submission plans the job before it can read a record (label schedule from a secure
generator, noise calibrated to the requested epsilon), then inserts the job row and its
ledger reservation in one transaction and commits; only then is the job id handed to the
queue. Planning needs only the dataset's label counts, which never change, so it runs
outside the write transaction (it can take seconds; the budget stays unlocked meanwhile);
the dataset and budget are checked again under lock before the reservation.

The outcome functions (:func:`store_result`, :func:`close_job`) are shared with the
workers. Like the ledger they add rows and flush; the caller commits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Budget, Dataset, Job, JobStatus, PromptSet, new_id, now
from app.ledger import ledger
from app.privacy.accounting import Accounting
from app.privacy.events import to_dict
from app.privacy.params import Method
from app.privacy.plan import PrivacyPlan
from app.privacy.rng import make_rng
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.generator import JobPlan, SynthesisResult, plan_job
from app.synthesis.tasks import TaskSpec, describe_validation_error

from .datasets import get_live_dataset, load_records
from .errors import ConflictError, InvalidError, NotFoundError, UnavailableError

if TYPE_CHECKING:
    from workers.queue import JobQueue

ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
TERMINAL = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)


def _no_budget(dataset_id: str) -> ConflictError:
    return ConflictError(
        f"dataset {dataset_id!r} has no budget: set one with PUT /v1/datasets/{dataset_id}/budget",
        code="no_budget",
    )


def _exceeded(err: ledger.BudgetExceededError) -> ConflictError:
    return ConflictError(
        str(err),
        code="budget_exceeded",
        remaining=err.remaining,
        spent=err.spent,
        total=err.total,
        requested=err.requested,
    )


def make_config(
    task: TaskSpec,
    *,
    method: Method,
    epsilon: float,
    delta: float,
    shots: int,
    accounting: Accounting,
    params: Mapping[str, Any] | None,
) -> SynthesisConfig:
    """The job's validated config: the task's defaults, then the client's parameters."""
    overrides = {k: v for k, v in (params or {}).items() if v is not None}
    if "seed" in overrides:  # a seed makes the noise predictable: never from a client
        raise InvalidError("params.seed: not accepted by the service")
    try:
        return SynthesisConfig.for_task(
            task.name,
            method=method,
            epsilon=epsilon,
            delta=delta,
            shots=shots,
            accounting=accounting,
            **overrides,
        )
    except ValidationError as err:
        raise InvalidError(f"invalid job parameters: {describe_validation_error(err)}") from None
    except TypeError as err:
        raise InvalidError(f"invalid job parameters: {err}") from None


def job_record(tenant_id: str, dataset_id: str, job_plan: JobPlan) -> Job:
    """The job row of a planned job (status queued, nothing charged yet)."""
    config = job_plan.config
    return Job(
        id=new_id(),
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        method=config.method.value,
        config={
            "synthesis": config.model_dump(mode="json"),
            "plan": job_plan.plan.model_dump(mode="json"),
            "sizes": job_plan.sizes,
        },
        schedule=list(job_plan.schedule),
        event=to_dict(job_plan.event()),
        epsilon=job_plan.epsilon(),
        delta=job_plan.delta,
        status=JobStatus.QUEUED.value,
        progress_done=0,
        progress_total=config.shots * config.tmax,
        touched_data=False,
        cancel_requested=False,
        attempts=0,
    )


def submit_job(
    session: Session,
    queue: JobQueue,
    *,
    tenant_id: str,
    dataset_id: str,
    method: Method,
    epsilon: float,
    delta: float | None = None,
    shots: int = 4,
    accounting: Accounting | None = None,
    params: Mapping[str, Any] | None = None,
) -> Job:
    """Plan, admit and enqueue a job; returns the committed row.

    ``delta`` defaults to the budget's delta, ``accounting`` to the budget's (another one is
    refused). Errors: 404 unknown dataset; 409 deleted dataset, no budget, or the job does
    not fit the budget (``remaining`` in the error); 422 parameters that cannot run. A
    failed submission stores nothing.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise InvalidError(f"epsilon: must be a positive finite number, got {epsilon}")
    dataset = get_live_dataset(session, tenant_id, dataset_id)
    budget = session.get(Budget, dataset.id)
    if budget is None:
        raise _no_budget(dataset_id)
    budget_accounting = Accounting(budget.accounting)
    if accounting is not None and Accounting(accounting) is not budget_accounting:
        raise InvalidError(
            f"accounting: the dataset's budget uses {budget_accounting.value} accounting; "
            f"submit the job with accounting={budget_accounting.value}"
        )
    if delta is not None and delta > budget.delta:
        raise InvalidError(f"delta: {delta:g} exceeds the budget's delta {budget.delta:g}")
    if epsilon > budget.epsilon * (1 + 1e-9):  # composition never costs less than one job
        spent = ledger.spend(session, budget).epsilon
        raise _exceeded(
            ledger.BudgetExceededError(requested=epsilon, spent=spent, total=budget.epsilon)
        )
    task = TaskSpec.model_validate(dataset.task)
    sizes = {str(k): int(v) for k, v in dataset.label_counts.items()}
    job_delta = delta if delta is not None else budget.delta
    session.rollback()  # end the read: planning takes seconds and needs no lock

    config = make_config(
        task,
        method=Method(method),
        epsilon=epsilon,
        delta=job_delta,
        shots=shots,
        accounting=budget_accounting,
        params=params,
    )
    try:
        job_plan = plan_job(task, sizes, config, make_rng())
    except ValueError as err:  # CalibrationError, SynthesisError, TaskError, sampling
        raise InvalidError(str(err), code="cannot_plan") from None
    job = job_record(tenant_id, dataset_id, job_plan)

    try:
        get_live_dataset(session, tenant_id, dataset_id, lock=True)
        session.add(job)
        ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id=job.id,
            event=job_plan.event(),
            epsilon=job.epsilon,
            delta=job.delta,
            accounting=budget_accounting,
        )
    except ledger.BudgetExceededError as err:
        session.rollback()
        raise _exceeded(err) from None
    except ledger.NoBudgetError:
        session.rollback()
        raise _no_budget(dataset_id) from None
    except ledger.LedgerError as err:  # the budget changed since it was read
        session.rollback()
        raise ConflictError(str(err), code="budget_changed") from None
    except BaseException:
        session.rollback()
        raise
    session.commit()

    try:
        queue.enqueue(job.id)
    except Exception as err:
        job = session.get(Job, job.id)
        close_job(
            session,
            job,
            status=JobStatus.FAILED,
            error=f"could not be queued ({type(err).__name__})",
        )
        session.commit()
        raise UnavailableError(
            f"job {job.id} could not be queued ({type(err).__name__}); its budget "
            "reservation was released",
            code="queue_unavailable",
        ) from None
    return job


def get_job(session: Session, tenant_id: str, job_id: str, *, lock: bool = False) -> Job:
    query = select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id)
    if lock:
        query = query.with_for_update()
    job = session.scalars(query).first()
    if job is None:
        raise NotFoundError(f"job {job_id!r} not found")
    return job


def list_jobs(
    session: Session,
    tenant_id: str,
    *,
    status: JobStatus | None = None,
    dataset_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Job]:
    query = select(Job).where(Job.tenant_id == tenant_id)
    if status is not None:
        query = query.where(Job.status == JobStatus(status).value)
    if dataset_id is not None:
        query = query.where(Job.dataset_id == dataset_id)
    query = query.order_by(Job.created_at.desc(), Job.id).limit(limit).offset(offset)
    return list(session.scalars(query))


def cancel_job(session: Session, tenant_id: str, job_id: str) -> Job:
    """Request cancellation; commits.

    A queued job is cancelled at once and its reservation released (it never read a
    record). A running job gets ``cancel_requested``; the worker stops it between tokens.
    Cancelling a cancelled job changes nothing; a finished one is a 409.
    """
    job = get_job(session, tenant_id, job_id, lock=True)
    if job.status == JobStatus.CANCELLED:
        return job
    if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        raise ConflictError(f"job {job_id!r} already {job.status}", code="job_finished")
    job.cancel_requested = True
    if job.status == JobStatus.QUEUED:
        close_job(session, job, status=JobStatus.CANCELLED, error=None)
    session.commit()
    return job


# --- outcomes, shared with the workers ---------------------------------------------------


def store_result(session: Session, job: Job, result: SynthesisResult) -> PromptSet:
    """Store a finished job's prompt set, mark the job succeeded and commit its charge.

    Idempotent (a redelivered task stores once); flushes, the caller commits. The prompt set
    records the epsilon and delta the ledger charged for the job.
    """
    existing = session.scalars(select(PromptSet).where(PromptSet.job_id == job.id)).first()
    if existing is None:
        dataset = session.get(Dataset, job.dataset_id)
        if dataset is None:
            raise NotFoundError(f"dataset {job.dataset_id!r} of job {job.id!r} not found")
        existing = PromptSet(
            tenant_id=job.tenant_id,
            job_id=job.id,
            dataset_id=job.dataset_id,
            task=dataset.task,
            demonstrations=[{"label": d.label, "text": d.text} for d in result.demonstrations],
            prompt=result.prompt,
            method=result.method,
            model=result.model,
            epsilon=job.epsilon,
            delta=job.delta,
        )
        session.add(existing)
        session.flush()
    job.status = JobStatus.SUCCEEDED.value
    job.prompt_set_id = existing.id
    job.progress_done = job.progress_total
    job.error = None
    job.finished_at = job.finished_at or now()
    ledger.commit(session, job.id)
    session.flush()
    return existing


def close_job(session: Session, job: Job, *, status: JobStatus, error: str | None = None) -> None:
    """End a job that produced no result (failed or cancelled).

    Its charge becomes final if it touched the data (``job.touched_data``), else its
    reservation is released. ``error`` is shown to clients: it must not contain record text.
    Flushes; the caller commits.
    """
    status = JobStatus(status)
    if status not in (JobStatus.FAILED, JobStatus.CANCELLED):
        raise ValueError(f"close_job ends a job as failed or cancelled, not {status}")
    job.status = status.value
    job.error = error
    job.finished_at = now()
    if job.touched_data:
        ledger.commit(session, job.id)
    else:
        ledger.release(session, job.id)
    session.flush()


def job_plan(job: Job, task: TaskSpec) -> JobPlan:
    """The :class:`JobPlan` drawn at submission, rebuilt from the job row."""
    config = SynthesisConfig.model_validate(job.config["synthesis"])
    plan = PrivacyPlan.model_validate(job.config["plan"])
    sizes = {str(k): int(v) for k, v in job.config["sizes"].items()}
    return JobPlan(task, config, plan, tuple(job.schedule), sizes, job.delta)


def load_job_inputs(session: Session, job: Job) -> tuple[TaskSpec, list[Record], JobPlan]:
    """What a worker needs to run ``job``: the task, the private records and the plan."""
    dataset = session.get(Dataset, job.dataset_id)
    if dataset is None or dataset.deleted_at is not None:
        raise ConflictError(f"dataset {job.dataset_id!r} of job {job.id!r} was deleted")
    task = TaskSpec.model_validate(dataset.task)
    return task, load_records(session, dataset.id), job_plan(job, task)
