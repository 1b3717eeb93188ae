"""Submit, watch and cancel synthesis jobs, of any method in the registry (``app.methods``)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AdminKey, ProviderDep, QueueDep, SessionDep
from app.api.schemas import IdFilter, JobCreate, JobPublic, Limit, Offset
from app.db.models import JobStatus
from app.services import jobs as service

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


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
        session, queue, body.to_request(), tenant_id=principal.tenant_id, backend=provider.kind
    )
    return JobPublic.from_row(job)


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
        dataset_id=dataset_id,
        limit=limit,
        offset=offset,
    )
    return [JobPublic.from_row(row) for row in rows]


@router.get("/{job_id}", response_model=JobPublic)
def get_job(job_id: str, principal: AdminKey, session: SessionDep) -> JobPublic:
    return JobPublic.from_row(service.get_job(session, principal.tenant_id, job_id))


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    summary="Cancel: a queued job at once (its reservation released), a running one soon",
)
def cancel_job(job_id: str, principal: AdminKey, session: SessionDep) -> JobPublic:
    return JobPublic.from_row(service.cancel_job(session, principal.tenant_id, job_id))
