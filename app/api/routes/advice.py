"""Advice before spending: measure methods, shots and epsilons on a public
labelled dataset, at no privacy cost (``app.eval.advice``, ``app.services.advice``)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AdminKey, AdviceDep, SessionDep, SettingsDep
from app.api.schemas import AdviceCreate, AdvicePublic
from app.services import advice as service
from app.services.datasets import resolve_ref

router = APIRouter(prefix="/v1/advice", tags=["advice"])


@router.post(
    "",
    status_code=202,
    response_model=AdvicePublic,
    summary="Measure candidate methods on a public labelled dataset (spends no budget)",
)
def create_advice(
    body: AdviceCreate,
    principal: AdminKey,
    session: SessionDep,
    runner: AdviceDep,
    settings: SettingsDep,
) -> AdvicePublic:
    row = service.create(
        session,
        principal.tenant_id,
        resolve_ref(session, principal.tenant_id, body.dataset_id),
        body.to_config(),
        cap=settings.advice_per_tenant,
    )
    session.commit()
    runner.submit(row.id)
    return AdvicePublic.model_validate(row)


@router.get("", response_model=list[AdvicePublic])
def list_advice(principal: AdminKey, session: SessionDep) -> list[AdvicePublic]:
    return [AdvicePublic.model_validate(r) for r in service.list_runs(session, principal.tenant_id)]


@router.get("/{advice_id}", response_model=AdvicePublic)
def get_advice(advice_id: str, principal: AdminKey, session: SessionDep) -> AdvicePublic:
    return AdvicePublic.model_validate(service.get(session, principal.tenant_id, advice_id))


@router.post(
    "/{advice_id}/cancel",
    response_model=AdvicePublic,
    summary="Cancel an advice run (a queued one at once, a running one at its next step)",
)
def cancel_advice(advice_id: str, principal: AdminKey, session: SessionDep) -> AdvicePublic:
    row = service.cancel(session, principal.tenant_id, advice_id)
    session.commit()
    return AdvicePublic.model_validate(row)
