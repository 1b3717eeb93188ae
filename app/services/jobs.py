"""Synthesis jobs: submission with budget admission, cancellation, and their outcomes.

Submission plans the job before it can read a record (label schedule from a secure
generator, noise calibrated to the requested epsilon), then inserts the job row and its
ledger reservation in one transaction and commits; only then is the job id handed to the
queue. The row carries an outbox mark (``dispatched_at``, committed with it), which
:mod:`app.services.job_leases` reads to send a lost job's task again. Planning needs
only the dataset's label counts, which never change, so it runs outside the write
transaction (it can take seconds; the budget stays unlocked meanwhile); the dataset and
budget are checked again under lock before the reservation, and so is the owner's
declaration that its counts are public (``Dataset.counts_public``, which the plan read).
Without that declaration a job plans with counts it releases under DP, charged in its own
event (``app.privacy.unit``); paper accounting needs the declaration and is refused without
it (422 ``counts_not_public``, naming how to make it).

A PromptPATE job (``method=promptpate``) is admitted the same way. It also names a *public*
dataset of unlabelled texts that its teachers label; that dataset is never charged, and it
must be public: a private dataset in that role would put its records, verbatim, into the
released student prompt. Its plan needs only the two record counts.

The outcome functions (:func:`store_result`, :func:`close_job`) are shared with the
workers. Like the ledger they add rows and flush; the caller commits.

A running job's attempt holds a *lease* (:mod:`app.services.job_leases`): :func:`cancel_job`
ends a job whose lease expired at once, as the workers' reaper does.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import (
    TERMINAL_STATUSES,
    Budget,
    Dataset,
    DatasetKind,
    Job,
    JobStatus,
    PromptSet,
    new_id,
    now,
)
from app.ledger import ledger
from app.ledger.owners import budget_of, budget_owner_id
from app.llm.factory import BackendKind
from app.methods.registry import (
    Counts,
    Method,
    MethodPlan,
    UnknownMethodError,
    counts_refusal,
    get_method,
    kinds_where,
    unknown_method,
)
from app.methods.token_loop import TokenLoop
from app.privacy.accounting import Accounting
from app.privacy.budget import fits_budget, spend_text
from app.privacy.events import DatasetEvent, to_dict
from app.privacy.synthesis import SynthesisPrivacy
from app.results import SoftPromptRelease, SynthesisResult
from app.synthesis.tasks import TaskSpec

from .budgets import dataset_groups, display_groups
from .calibrations import DatabaseCalibrationStore, DatabasePlannerStore
from .count_releases import current_release, dataset_counts
from .datasets import get_dataset, get_live_dataset
from .errors import ConflictError, InvalidError, NotFoundError, UnavailableError
from .job_end import (
    SUCCEEDED_REASON,
    charged_reason,
    close_job,
    lease_expired,
    released_reason,
)
from .job_leases import lease_error
from .job_plan import JobInputs, check_epsilon, job_config, plan_job
from .job_request import JobRequest
from .prompts import pending_validation
from .queue import JobQueue
from .rows import tenant_page, tenant_row


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
        adds=err.adds,
    )


def job_record(
    tenant_id: str,
    dataset_id: str,
    method: Method,
    plan: MethodPlan,
    public_dataset_id: str | None = None,
    backend: BackendKind | None = None,
) -> Job:
    """The job row of a planned job (status queued, nothing charged yet)."""
    stored = plan.stored()
    return Job(
        id=new_id(),
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        public_dataset_id=public_dataset_id,
        method=method.name,
        config=dict(stored.config),
        schedule=list(stored.schedule),
        event=to_dict(plan.event()),
        epsilon=plan.epsilon(),
        delta=plan.delta,
        status=JobStatus.QUEUED.value,
        progress_done=0,
        progress_total=plan.progress_total,
        touched_data=False,
        cancel_requested=False,
        attempts=0,
    )


def get_public_dataset(session: Session, tenant_id: str, dataset_id: str) -> Dataset:
    """The tenant's live *public* dataset, for a PromptPATE job's unlabelled inputs.

    A private dataset is refused (422): the student prompt is made of public inputs, so a
    private one's records would be released verbatim, unpriced.
    """
    try:
        dataset = get_dataset(session, tenant_id, dataset_id)
    except NotFoundError:
        raise NotFoundError(f"public_dataset_id: dataset {dataset_id!r} not found") from None
    if dataset.kind != DatasetKind.PUBLIC:
        raise InvalidError(
            f"public_dataset_id: dataset {dataset_id!r} is private; PromptPATE puts its public "
            "inputs verbatim into the released prompt, so they must come from a public dataset "
            "(upload the texts with public=true)",
            code="not_public",
        )
    if dataset.deleted_at is not None:
        raise ConflictError(
            f"public_dataset_id: dataset {dataset_id!r} was deleted: its records are gone",
            code="dataset_deleted",
        )
    return dataset


def check_validation_dataset(
    session: Session, tenant_id: str, dataset_id: str | None, task: TaskSpec
) -> None:
    """Refuse a validation set the job's prompt cannot be scored on, naming why: not found
    (404), deleted (409), private (422 ``not_public``: scoring is post-processing on public
    data only, and a private dataset's records would be read unpriced), unlabelled (422
    ``not_labelled``), or labelled for another task (422 ``validation_labels``: its labels
    must be the job's task labels). None: the job names none."""
    if dataset_id is None:
        return
    field = "validation_dataset_id"
    try:
        dataset = get_dataset(session, tenant_id, dataset_id)
    except NotFoundError:
        raise NotFoundError(f"{field}: dataset {dataset_id!r} not found") from None
    if dataset.deleted_at is not None:
        raise ConflictError(
            f"{field}: dataset {dataset_id!r} was deleted: its records are gone",
            code="dataset_deleted",
        )
    if dataset.kind != DatasetKind.PUBLIC:
        raise InvalidError(
            f"{field}: dataset {dataset_id!r} is private; a prompt is scored on public "
            "labelled data only (upload it with public=true and labelled=true)",
            code="not_public",
        )
    if not dataset.label_counts:
        raise InvalidError(
            f"{field}: dataset {dataset_id!r} has no labels (upload the validation set with "
            "public=true, labelled=true and a task)",
            code="not_labelled",
        )
    theirs = TaskSpec.model_validate(dataset.task)
    if theirs.kind != task.kind or set(theirs.labels) != set(task.labels):
        raise InvalidError(
            f"{field}: dataset {dataset_id!r} is labelled for task {theirs.name!r} "
            f"({theirs.kind.value}, labels {', '.join(theirs.labels) or '-'}); the job's task "
            f"{task.name!r} has labels {', '.join(task.labels) or '-'}",
            code="validation_labels",
        )


def check_backend(method: Method, backend: BackendKind) -> None:
    """409 ``backend_unsupported`` if ``method`` cannot run on ``backend``: a method that
    needs gradients and input embeddings (PromptDPSGD) runs on the local model only. (A
    worker on another backend than its API server's fails such a job before it reads a
    record: ``MethodPlan.check_backend``.)"""
    if method.needs_gradients and backend is not BackendKind.TRANSFORMERS:
        raise ConflictError(
            f"method {method.name} trains input embeddings with gradients of the model, "
            "which needs the local transformers backend; this server runs the vLLM HTTP "
            "backend (DPSYN_BACKEND=vllm). Run it on a server whose workers use "
            "DPSYN_BACKEND=transformers",
            code="backend_unsupported",
        )


def _check_request(method: Method, request: JobRequest) -> None:
    """422 for a request that cannot run whatever the data: a bad epsilon, or a public
    dataset missing for a method that reads one (or given to one that does not)."""
    check_epsilon(request.epsilon)
    readers = " or ".join(kinds_where(lambda m: m.reads_public))
    if method.reads_public and request.public_dataset_id is None:
        raise InvalidError(
            f"public_dataset_id: required for method {method.name} (the ID of the public "
            "dataset of unlabelled texts it reads)"
        )
    if not method.reads_public and request.public_dataset_id is not None:
        raise InvalidError(
            f"public_dataset_id: only method {readers} reads a public dataset, not {method.name}"
        )


def _method_of(request: JobRequest) -> Method:
    """The request's method: checked when the request was built, but it may have left the
    registry since (a 422 naming those registered now)."""
    try:
        return get_method(request.method)
    except UnknownMethodError:
        raise InvalidError(f"method: {unknown_method()}") from None


def plan_submission(
    session: Session,
    request: JobRequest,
    *,
    tenant_id: str,
    backend: BackendKind | None = None,
) -> PlannedJob:
    """Check and plan a job as :func:`submit_job` admits it; nothing is stored, and the
    session's read transaction is ended before planning. Errors as :func:`submit_job`.

    ``delta`` defaults to the budget's delta, ``accounting`` to the budget's (another one is
    refused). ``public_dataset_id`` is required for PromptPATE and refused otherwise. Errors:
    404 unknown dataset; 409 deleted dataset, no budget, or the job does not fit the budget
    (``remaining`` in the error); 422 parameters that cannot run, or a dataset of the wrong
    kind. A failed submission stores nothing.
    """
    dataset_id, public_dataset_id = request.dataset_id, request.public_dataset_id
    method = _method_of(request)
    if backend is not None:
        check_backend(method, backend)
    _check_request(method, request)
    dataset = get_live_dataset(session, tenant_id, dataset_id)
    if dataset.kind == DatasetKind.PUBLIC:
        what = (
            "public and labelled (a validation set: name it as validation_dataset_id)"
            if dataset.label_counts
            else "public (unlabelled texts, for PromptPATE: public_dataset_id)"
        )
        raise InvalidError(
            f"dataset_id: dataset {dataset_id!r} is {what}; a job synthesises from a private "
            "dataset and is charged to its budget",
            code="public_dataset",
        )
    public = (
        get_public_dataset(session, tenant_id, public_dataset_id)
        if public_dataset_id is not None
        else None
    )
    budget = _admissible_budget(session, dataset, request)
    budget_accounting = Accounting(budget.accounting)
    delta, epsilon = request.delta, request.epsilon
    task = TaskSpec.model_validate(dataset.task)
    check_validation_dataset(session, tenant_id, request.validation_dataset_id, task)
    job_delta = delta if delta is not None else budget.delta
    unread = Counts(None)  # the config is checked before any count is read
    inputs = JobInputs(
        method, task, unread, epsilon, job_delta, budget_accounting, request.shots, request.params
    )
    job_config(inputs)
    # Declared public, none (a method that plans without them), or the dataset's one count
    # release, drawn and charged here if this is the first plan that needs it.
    counts = dataset_counts(session, dataset, method, public.record_count if public else 0)
    session.rollback()  # end the read: planning may take seconds and needs no lock
    inputs = dataclasses.replace(inputs, counts=counts)
    engine = session.get_bind().engine
    plan = plan_job(inputs, DatabaseCalibrationStore(engine), DatabasePlannerStore(engine))
    job = job_record(tenant_id, dataset_id, method, plan, public_dataset_id)
    job.validation_dataset_id = request.validation_dataset_id
    release = counts.release
    return PlannedJob(
        method=method,
        plan=plan,
        job=job,
        accounting=budget_accounting,
        counts_public=counts.declared_public,
        release_id=release.id if release is not None else None,
    )


def _admissible_budget(session: Session, dataset: Dataset, request: JobRequest) -> Budget:
    """The dataset's budget, if the request can be charged to it: the budget's accounting
    (which the counts allow), a delta no larger than its own, an epsilon no larger than its
    total (409 no budget or budget exceeded, 422 otherwise)."""
    budget = budget_of(session, dataset.id)
    if budget is None:
        raise _no_budget(budget_owner_id(session, dataset.id))
    accounting = Accounting(budget.accounting)
    if request.accounting is not None and request.accounting is not accounting:
        raise InvalidError(
            f"accounting: the dataset's budget uses {accounting.value} accounting; "
            f"submit the job with accounting={accounting.value}"
        )
    _check_counts(dataset, accounting)
    delta, epsilon = request.delta, request.epsilon
    if delta is not None and delta > budget.delta:
        raise InvalidError(f"delta: {delta:g} exceeds the budget's delta {budget.delta:g}")
    if not fits_budget(epsilon, budget.epsilon):  # composition never costs less than one job
        spent = ledger.spend(session, budget).epsilon
        raise _exceeded(
            ledger.BudgetExceededError(requested=epsilon, spent=spent, total=budget.epsilon)
        )
    return budget


def _check_counts(dataset: Dataset, accounting: Accounting) -> None:
    """422 ``counts_not_public`` for a job whose accounting needs the dataset's counts
    declared public (paper accounting) on a dataset whose owner has not declared them."""
    refusal = counts_refusal(accounting, bool(dataset.counts_public))
    if refusal is not None:
        raise InvalidError(
            f"{refusal}: declare them with PUT /v1/datasets/{dataset.id}/counts-public, or "
            "use tight accounting (a budget's accounting can change while no job is charged: "
            f"PUT /v1/datasets/{dataset.id}/budget)",
            code="counts_not_public",
        )


@dataclass(frozen=True)
class PlannedJob:
    """A job planned for admission: its method, plan, job row (queued, not stored), the
    budget's accounting, and whether the dataset's counts were declared public (planned
    with them; admission checks that the declaration still stands)."""

    method: Method
    plan: MethodPlan
    job: Job
    accounting: Accounting
    counts_public: bool = False
    release_id: str | None = None  # the count release it was planned from (None: none)


@dataclass(frozen=True)
class Quote:
    """What a job would cost before it is submitted: its own epsilon (what the ledger would
    reserve), each label's noise multiplier, and the dataset's spend, composed and summed,
    now and if it were admitted now (the dataset's count release included in both, and in
    ``spend_now.counts_epsilon``)."""

    epsilon: float
    delta: float
    budget_epsilon: float
    spend_now: ledger.Spend
    spend_after: ledger.Spend
    event: DatasetEvent | None = None  # what the job would charge (per-label breakdown)
    noise: dict[str, float] = dataclasses.field(default_factory=dict)  # label -> sigma

    @property
    def fits(self) -> bool:
        return fits_budget(self.spend_after.epsilon, self.budget_epsilon)


def label_noise(method: Method | None, config: Mapping[str, Any] | None) -> dict[str, float]:
    """Each label's noise multiplier as a job's stored plan holds it (a token-loop job:
    ``SynthesisPrivacy.noise_by_label``, every label calibrated to its own released size);
    {} for other methods and for jobs planned before labels had their own noise.
    Read from the stored plan, so that a quote and the job it admits say the same."""
    if not isinstance(method, TokenLoop) or not config or not isinstance(config.get("plan"), dict):
        return {}
    try:
        return SynthesisPrivacy.model_validate(config["plan"]).noise_by_label()
    except ValidationError:  # a plan this version cannot read shows no noise, not an error
        return {}


def quote_job(
    session: Session,
    request: JobRequest,
    *,
    tenant_id: str,
    backend: BackendKind | None = None,
) -> Quote:
    """The planner's answer for a job, without submitting it (the dashboard shows it before
    the admin submits). The same checks and plan as :func:`submit_job`, so a job refused
    there is refused here with the same error. The plan is discarded: a submission plans
    afresh, and another admission may change the spend meanwhile."""
    planned = plan_submission(session, request, tenant_id=tenant_id, backend=backend)
    budget = budget_of(session, request.dataset_id)
    if budget is None:
        raise _no_budget(budget_owner_id(session, request.dataset_id))
    event = planned.plan.event()
    quote = Quote(
        epsilon=planned.job.epsilon,
        delta=planned.job.delta,
        budget_epsilon=budget.epsilon,
        spend_now=ledger.spend(session, budget),
        spend_after=ledger.spend_with(
            session, budget, event, planned.job.epsilon, request.dataset_id, planned.job.delta
        ),
        event=event,
        noise=label_noise(planned.method, planned.job.config),
    )
    session.rollback()
    return quote


@dataclass(frozen=True)
class GroupChange:
    """One label group's composed spend before and after a quoted job."""

    labels: tuple[str, ...]
    before: float
    after: float
    binding_before: bool
    binding_after: bool

    @property
    def charged(self) -> bool:
        return self.after > self.before


def quote_groups(
    session: Session, tenant_id: str, quote: Quote, dataset_id: str
) -> list[GroupChange]:
    """Each label group's spend before and after the quoted job, and which group sets the
    dataset's spend before and after: why a job may add less to the dataset's spend than its
    own epsilon, or nothing (it charges other labels than the binding group's). The groups a
    page lists only (:func:`~app.services.budgets.display_groups`); empty without an event."""
    budget = budget_of(session, dataset_id)
    if budget is None or quote.event is None:
        return []
    dataset = get_dataset(session, tenant_id, dataset_id)
    before = dataset_groups(session, budget, dataset)
    after = dataset_groups(session, budget, dataset, extra=quote.event)
    session.rollback()
    was = {g.labels: g for g in before}
    shown = {g.labels for g in (*display_groups(before), *display_groups(after))}
    changes = []
    for group in after:
        if group.labels not in shown:
            continue
        old = was.get(group.labels)
        changes.append(
            GroupChange(
                labels=tuple(group.labels),
                before=old.epsilon if old is not None else 0.0,
                after=group.epsilon,
                binding_before=bool(old and old.binding),
                binding_after=group.binding,
            )
        )
    return changes


def submit_job(
    session: Session,
    queue: JobQueue,
    request: JobRequest,
    *,
    tenant_id: str,
    backend: BackendKind | None = None,
    submitted_by: str | None = None,
) -> Job:
    """Plan, admit and enqueue a job; returns the committed row.

    ``delta`` defaults to the budget's delta, ``accounting`` to the budget's (another one is
    refused). ``public_dataset_id`` is required for PromptPATE and refused otherwise.
    ``backend`` is the kind of model backend the service runs jobs on: a method that needs
    the local model (PromptDPSGD) is refused on vLLM. Errors: 404 unknown dataset; 409
    deleted dataset, no budget, the job does not fit the budget (``remaining`` in the error),
    or the method cannot run on this backend; 422 parameters that cannot run, or a dataset of
    the wrong kind. A failed submission stores nothing (nor reserves anything). The job is
    committed with its outbox mark before its task is sent: if this process dies in between,
    a dispatcher sends it later. A send that fails is a 503 and the job fails, released,
    unless a dispatcher's copy started it meanwhile. ``submitted_by`` is the ID of the
    API key that asked (recorded on the job; None outside the API).
    """
    return submit_jobs(
        session,
        queue,
        [request],
        tenant_id=tenant_id,
        backend=backend,
        submitted_by=submitted_by,
    )[0]


#: Most jobs one declared batch may hold.
MAX_BATCH = 50


def submit_jobs(
    session: Session,
    queue: JobQueue,
    requests: Sequence[JobRequest],
    *,
    tenant_id: str,
    backend: BackendKind | None = None,
    submitted_by: str | None = None,
) -> list[Job]:
    """Plan, admit and enqueue jobs **declared together** (one request, before any of them
    runs), as :func:`submit_job` does one. All on one private dataset. They are admitted
    together or not at all, under one lock, and the ledger records them as one batch: none
    was chosen after reading another's output, so the ledger's filter may price them as one
    mechanism (docs/privacy.md, "Declared batches"). Errors as :func:`submit_job`; 422 an
    empty batch, more than :data:`MAX_BATCH` jobs, or jobs on several datasets."""
    _check_batch(requests)
    planned = [
        plan_submission(session, request, tenant_id=tenant_id, backend=backend)
        for request in requests
    ]
    batch_id = new_id() if len(requests) > 1 else None
    _admit_all(session, requests[0], planned, submitted_by, tenant_id, batch_id)
    return [_enqueue(session, queue, p.job) for p in planned]


def _check_batch(requests: Sequence[JobRequest]) -> None:
    if not requests:
        raise InvalidError("jobs: a batch needs at least one job")
    if len(requests) > MAX_BATCH:
        raise InvalidError(f"jobs: a batch holds at most {MAX_BATCH} jobs, got {len(requests)}")
    datasets = sorted({r.dataset_id for r in requests})
    if len(datasets) > 1:
        raise InvalidError(
            f"jobs: a batch is declared on one dataset (its budget prices them together); "
            f"got {len(datasets)}: {', '.join(datasets)}"
        )


def _admit_all(
    session: Session,
    request: JobRequest,
    planned: Sequence[PlannedJob],
    submitted_by: str | None,
    tenant_id: str,
    batch_id: str | None,
) -> None:
    """Admit every planned job in one transaction, committed with their outbox marks, or
    none (the first that does not fit refuses the batch, with the error of that job)."""
    dataset_id = request.dataset_id
    try:
        locked = get_live_dataset(session, tenant_id, dataset_id, lock=True)
        for one in planned:
            _check_declaration(session, locked, one)
            public_id = one.job.public_dataset_id
            if public_id is not None:  # deleted meanwhile? (its deletion locks its row)
                get_live_dataset(session, tenant_id, public_id, lock=True)
            one.job.submitted_by = submitted_by
            session.add(one.job)
            ledger.admit(
                session,
                dataset_id=dataset_id,
                job_id=one.job.id,
                event=one.plan.event(),
                epsilon=one.job.epsilon,
                delta=one.job.delta,
                accounting=one.accounting,
                batch_id=batch_id,
            )
    except ledger.BudgetExceededError as err:
        session.rollback()
        raise _exceeded(err) from None
    except ledger.NoBudgetError:
        session.rollback()
        raise _no_budget(dataset_id) from None
    except ledger.LedgerError as err:  # the budget changed since it was read, or is held
        session.rollback()
        code = "ledger_rolled_back" if isinstance(err, ledger.LedgerHeldError) else "budget_changed"
        raise ConflictError(str(err), code=code) from None
    except BaseException:
        session.rollback()
        raise
    # The outbox mark, committed with the job: if this process dies before the task reaches
    # the queue, a dispatcher sends it once the mark is older than the bound.
    for one in planned:
        one.job.dispatched_at = now()
    session.commit()


def _enqueue(session: Session, queue: JobQueue, job: Job) -> Job:
    """Send an admitted job's task. A send that fails is a 503 and the job fails, released,
    unless a dispatcher's copy started it meanwhile."""
    try:
        queue.enqueue(job.id)
    except Exception as err:
        session.refresh(job, with_for_update=True)
        if job.status != JobStatus.QUEUED:  # a dispatcher's copy got through meanwhile
            session.commit()  # nothing written: ends the lock, keeps the row as read
            return job
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


def _check_declaration(session: Session, dataset: Dataset, planned: PlannedJob) -> None:
    """409 ``counts_changed`` if the owner declared the counts public, or withdrew it, while
    the job was planned (it was planned with the other setting), or if the job was planned
    from a count release that is no longer the one of the dataset's records."""
    if bool(dataset.counts_public) != planned.counts_public:
        raise ConflictError(
            f"dataset {dataset.id!r}: its counts_public setting changed while the job was "
            "planned; submit it again",
            code="counts_changed",
        )
    if planned.release_id is not None:
        current = current_release(session, dataset)
        if current is None or current.id != planned.release_id:
            raise ConflictError(
                f"dataset {dataset.id!r}: its records changed while the job was planned; "
                "submit it again",
                code="counts_changed",
            )


def get_job(session: Session, tenant_id: str, job_id: str, *, lock: bool = False) -> Job:
    return tenant_row(session, Job, tenant_id, job_id, "job", lock=lock)


def list_jobs(
    session: Session,
    tenant_id: str,
    *,
    status: JobStatus | None = None,
    dataset_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Job]:
    where = []
    if status is not None:
        where.append(Job.status == JobStatus(status).value)
    if dataset_id is not None:
        where.append(Job.dataset_id == dataset_id)
    return tenant_page(session, Job, tenant_id, *where, limit=limit, offset=offset)


def cancel_job(session: Session, tenant_id: str, job_id: str) -> Job:
    """Request cancellation; commits.

    A queued job is cancelled at once and its reservation released (it never read a
    record). A running job gets ``cancel_requested``; the worker stops it when the run next
    reports progress. A running job whose lease expired has no worker left to stop it: it is
    cancelled at once (charged if it read the data). Cancelling a cancelled job changes
    nothing; a finished one is a 409.
    """
    job = get_job(session, tenant_id, job_id, lock=True)
    if job.status == JobStatus.CANCELLED:
        return job
    if job.status in TERMINAL_STATUSES:
        raise ConflictError(f"job {job_id!r} already {job.status}", code="job_finished")
    job.cancel_requested = True
    if job.status == JobStatus.QUEUED:
        close_job(session, job, status=JobStatus.CANCELLED, error=None)
    elif lease_expired(job, now()):
        close_job(session, job, status=JobStatus.CANCELLED, error=lease_error(job))
    session.commit()
    return job


# --- what a job cost, in words (the API's and the dashboard's) -----------------------------


def job_charges(session: Session, jobs: Collection[Job]) -> dict[str, ledger.JobCharge]:
    """Each job's charge as the ledger states it (one query for all of ``jobs``)."""
    return ledger.job_charges(session, [job.id for job in jobs])


def dataset_names(session: Session, tenant_id: str, ids: Collection[str]) -> dict[str, str]:
    """The names of the tenant's datasets among ``ids`` (deleted ones too: a job or prompt
    outlives its dataset), for lists that show them. Names are public metadata."""
    if not ids:
        return {}
    rows = session.execute(
        select(Dataset.id, Dataset.name).where(
            Dataset.tenant_id == tenant_id, Dataset.id.in_(list(set(ids)))
        )
    )
    return {row.id: row.name for row in rows}


def charge_note(job: Job, charge: ledger.JobCharge | None) -> str:
    """One sentence on what ``job`` costs and why, for clients: the reason its closing
    ledger entry recorded, or, while it is still reserved, what will decide it. Built from
    the job's status, its read mark and the ledger only: never record text."""
    if charge is None:  # every admitted job has a reservation; a hand-written row may not
        return "not in the ledger: nothing was reserved or charged for this job"
    if charge.state is ledger.ChargeState.RESERVED:
        held = f"reserved: epsilon {spend_text(charge.epsilon)} is held against the budget"
        if job.touched_data:
            return f"{held}; the job has read the private data, so it stays charged however it ends"
        return (
            f"{held}; it is released if the job ends before it reads a private record "
            "(cancel it now to get it back), and charged once it has read one"
        )
    if charge.reason is not None:
        return charge.reason
    # Entries written before reasons were kept: the rule that wrote them.
    status = JobStatus(job.status)
    if charge.state is ledger.ChargeState.RELEASED:
        return released_reason(status)
    return SUCCEEDED_REASON if status == JobStatus.SUCCEEDED else charged_reason(status)


# --- outcomes, shared with the workers ---------------------------------------------------


def store_result(session: Session, job: Job, result: SynthesisResult) -> PromptSet:
    """Store a finished job's prompt set, mark the job succeeded and commit its charge.

    Idempotent (a redelivered task stores once); flushes, the caller commits. The prompt set
    records the epsilon and delta the ledger charged for the job, and a PromptDPSGD result's
    soft prompt (:func:`attach_soft_prompt`). A job that names a validation set stores its
    prompt with the validation pending: the worker scores it after this commit, so that a
    scoring failure can never undo the prompt (``app.services.prompts``).
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
            validation=(
                pending_validation(job.validation_dataset_id) if job.validation_dataset_id else None
            ),
        )
        if result.soft_prompt is not None:
            attach_soft_prompt(existing, result.soft_prompt)
        session.add(existing)
        session.flush()
    job.status = JobStatus.SUCCEEDED.value
    job.prompt_set_id = existing.id
    method = get_method(job.method)
    job.stats = method.public_stats(result)
    job.progress_done = method.progress_done(result, job.progress_total)
    job.error = None
    job.finished_at = job.finished_at or now()
    ledger.commit(session, job.id, reason=SUCCEEDED_REASON)
    session.flush()
    return existing


def attach_soft_prompt(prompt_set: PromptSet, soft_prompt: SoftPromptRelease) -> None:
    """Put a PromptDPSGD result's soft prompt into its prompt set: the safetensors bytes,
    their SHA-256 and the shape. It must be for the prompt set's model (the one the job ran
    on): /complete refuses it on any other, by that name."""
    if soft_prompt.model != prompt_set.model:
        raise ValueError(
            f"the soft prompt is for model {soft_prompt.model!r}, the result for "
            f"{prompt_set.model!r}"
        )
    data = soft_prompt.to_bytes()
    prompt_set.soft_prompt = data
    prompt_set.soft_prompt_sha256 = hashlib.sha256(data).hexdigest()
    prompt_set.soft_prompt_length = soft_prompt.length
    prompt_set.soft_prompt_hidden = soft_prompt.hidden
