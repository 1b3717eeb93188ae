"""A dataset's privacy budget and its ledger, and the budgets past their warn threshold."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy.orm import Session

from app.api.deps import AdminKey, SessionDep
from app.api.schemas import BudgetPublic, BudgetSummary, BudgetUpdate
from app.services import budgets as service

router = APIRouter(tags=["budgets"])
_ONE = "/v1/datasets/{dataset_id}/budget"


@router.put(_ONE, response_model=BudgetPublic, summary="Set or change the dataset's budget")
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
        warn_threshold=body.warn_threshold,
    )
    view = service.budget_view(session, tenant_id=principal.tenant_id, dataset_id=dataset_id)
    return BudgetPublic.from_view(view)


@router.get(_ONE, response_model=BudgetPublic, summary="Budget, spend and ledger history")
def get_budget(dataset_id: str, principal: AdminKey, session: SessionDep) -> BudgetPublic:
    view = service.budget_view(session, tenant_id=principal.tenant_id, dataset_id=dataset_id)
    return BudgetPublic.from_view(view)


@router.get(
    _ONE + "/ledger.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}, "description": "The ledger as CSV."}},
    summary="The ledger as CSV, with the spend after each entry",
)
def get_ledger_csv(dataset_id: str, principal: AdminKey, session: SessionDep) -> Response:
    return ledger_csv_response(session, principal.tenant_id, dataset_id)


def ledger_csv_response(session: Session, tenant_id: str, dataset_id: str) -> Response:
    """The ledger CSV as a download."""
    filename, text = service.ledger_export(session, tenant_id=tenant_id, dataset_id=dataset_id)
    return Response(
        content=text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get(
    "/v1/budgets",
    response_model=list[BudgetSummary],
    summary="Budgeted datasets and their spend; over_threshold=true: only those at or past "
    "their warn threshold (for an alerting tool)",
)
def list_budgets(
    principal: AdminKey, session: SessionDep, over_threshold: bool = False
) -> list[BudgetSummary]:
    tenant = principal.tenant_id
    if over_threshold:
        rows = service.over_threshold(session, tenant_id=tenant)
    else:
        rows = [r for r in service.overview(session, tenant_id=tenant) if r.budget is not None]
    return [BudgetSummary.from_row(row) for row in rows]
