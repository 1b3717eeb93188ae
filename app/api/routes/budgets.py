"""A dataset's privacy budget and its ledger."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AdminKey, SessionDep
from app.api.schemas import BudgetPublic, BudgetUpdate
from app.services import budgets as service

router = APIRouter(prefix="/v1/datasets/{dataset_id}/budget", tags=["budgets"])


@router.put("", response_model=BudgetPublic, summary="Set or change the dataset's budget")
def put_budget(
    dataset_id: str, body: BudgetUpdate, principal: AdminKey, session: SessionDep
) -> BudgetPublic:
    service.set_budget(
        session,
        tenant_id=principal.tenant_id,
        dataset_id=dataset_id,
        epsilon=body.epsilon,
        delta=body.delta,
        accounting=body.accounting,
    )
    view = service.budget_view(session, tenant_id=principal.tenant_id, dataset_id=dataset_id)
    return BudgetPublic.from_view(view)


@router.get("", response_model=BudgetPublic, summary="Budget, spend and ledger history")
def get_budget(dataset_id: str, principal: AdminKey, session: SessionDep) -> BudgetPublic:
    view = service.budget_view(session, tenant_id=principal.tenant_id, dataset_id=dataset_id)
    return BudgetPublic.from_view(view)
