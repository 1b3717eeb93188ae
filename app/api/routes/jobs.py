"""Submit, watch and cancel synthesis jobs, of any method in the registry (``app.methods``).

Every job response carries what the job costs as the ledger states it (``charge``,
``charged_epsilon``, ``charge_note``): :func:`job_views` reads the ledger entries of all the
jobs of a response in one query.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter
from sqlalchemy.orm import Session

from app.api.deps import AdminKey, ProviderDep, QueueDep, SessionDep
from app.api.schemas import IdFilter, JobBatch, JobCreate, JobPublic, JobQuote, Limit, Offset
from app.db.models import Job, JobStatus
from app.services import jobs as service
from app.services.datasets import resolve_fields, resolve_ref
from app.services.job_request import JobRequest

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def job_views(session: Session, rows: Sequence[Job]) -> list[JobPublic]:
    """The public view of each job, with its charge from the ledger and its dataset's name
    (one query each for all)."""
    views = JobPublic.from_rows(rows, service.job_charges(session, rows))
    if not rows:
        return views
    names = service.dataset_names(session, rows[0].tenant_id, [row.dataset_id for row in rows])
    return [view.model_copy(update={"dataset_name": names.get(view.dataset_id)}) for view in views]


def job_view(session: Session, row: Job) -> JobPublic:
    return job_views(session, [row])[0]


@router.post(
    "",
    status_code=201,
    response_model=JobPublic,
    summary="Plan a job, reserve its cost against the dataset's budget, and queue it",
)
def submit_job(
    body: JobCreate,
    principal: AdminKey,
    session: SessionDep,
    queue: QueueDep,
    provider: ProviderDep,
) -> JobPublic:
    job = service.submit_job(
        session,
        queue,
        _by_id(session, principal.tenant_id, body.to_request()),
        tenant_id=principal.tenant_id,
        backend=provider.kind,
        submitted_by=principal.key_id,
    )
    return job_view(session, job)


@router.post(
    "/batch",
    status_code=201,
    response_model=list[JobPublic],
    summary="Declare several jobs on one dataset together: admitted (and priced) as one batch",
)
def submit_batch(
    body: JobBatch,
    principal: AdminKey,
    session: SessionDep,
    queue: QueueDep,
    provider: ProviderDep,
) -> list[JobPublic]:
    """Jobs declared together, before any of them runs (a team's plan, a grid): all admitted
    or none, recorded on the ledger as one batch, so the budget's filter may price them as
    one mechanism (docs/privacy.md, "Declared batches"). Errors as a single submission's,
    for the first job that fails; 422 for an empty batch or jobs on several datasets."""
    requests = [_by_id(session, principal.tenant_id, job.to_request()) for job in body.jobs]
    rows = service.submit_jobs(
        session,
        queue,
        requests,
        tenant_id=principal.tenant_id,
        backend=provider.kind,
        submitted_by=principal.key_id,
    )
    return job_views(session, rows)


@router.post(
    "/quote",
    response_model=JobQuote,
    summary="What a job would cost, planned as a submission plans it; nothing is reserved",
)
def quote_job(
    body: JobCreate, principal: AdminKey, session: SessionDep, provider: ProviderDep
) -> JobQuote:
    """The same checks and plan as a submission (a job refused there is refused here with the
    same error), and the dataset's composed spend before and after, per label group."""
    request = _by_id(session, principal.tenant_id, body.to_request())
    quote = service.quote_job(
        session, request, tenant_id=principal.tenant_id, backend=provider.kind
    )
    groups = service.quote_groups(session, principal.tenant_id, quote, request.dataset_id)
    return JobQuote.from_quote(request.dataset_id, quote, groups)


def _by_id(session: Session, tenant_id: str, request: JobRequest) -> JobRequest:
    """The request with each dataset it names by a unique name named by its ID instead."""
    fields = ("dataset_id", "public_dataset_id", "validation_dataset_id")
    values = {name: getattr(request, name) for name in fields}
    return request.model_copy(update=resolve_fields(session, tenant_id, values))


@router.get("", response_model=list[JobPublic])
def list_jobs(
    principal: AdminKey,
    session: SessionDep,
    status: JobStatus | None = None,
    dataset_id: IdFilter = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[JobPublic]:
    rows = service.list_jobs(
        session,
        principal.tenant_id,
        status=status,
        dataset_id=resolve_ref(session, principal.tenant_id, dataset_id) if dataset_id else None,
        limit=limit,
        offset=offset,
    )
    return job_views(session, rows)


@router.get("/{job_id}", response_model=JobPublic)
def get_job(job_id: str, principal: AdminKey, session: SessionDep) -> JobPublic:
    return job_view(session, service.get_job(session, principal.tenant_id, job_id))


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    summary="Cancel: a queued job at once (its reservation released), a running one soon",
    description="A job cancelled before its worker marked it as reading the private data "
    "has its reservation released; one cancelled after stays charged (``charge_note`` says "
    "which, and why).",
)
def cancel_job(job_id: str, principal: AdminKey, session: SessionDep) -> JobPublic:
    return job_view(session, service.cancel_job(session, principal.tenant_id, job_id))
