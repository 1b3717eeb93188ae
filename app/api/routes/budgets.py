"""A dataset's privacy budget and its ledger, and the budgets past their warn threshold.

``GET /v1/budgets`` answers an admin key with its own tenant's budgets; with
``all_tenants=true`` it answers an ``org:read`` key with every tenant's, and
``GET /v1/fleet/ledgers.csv`` gives that key every ledger. Each scope asking the other's
view is a 403 naming why: an admin key never sees another tenant, and an org:read key sees
budgets only across tenants, never one tenant's datasets, records or jobs.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from sqlalchemy.orm import Session

from app.api.deps import AdminKey, BudgetReader, DatasetRef, OrgKey, Principal, SessionDep
from app.api.schemas import BudgetPublic, BudgetSummary, BudgetUpdate
from app.db.models import KeyScope, Tenant
from app.services import budgets as service
from app.services import fleet
from app.services.errors import ForbiddenError

router = APIRouter(tags=["budgets"])
_ONE = "/v1/datasets/{dataset_id}/budget"


@router.put(_ONE, response_model=BudgetPublic, summary="Set or change the dataset's budget")
def put_budget(
    dataset_id: DatasetRef, body: BudgetUpdate, principal: AdminKey, session: SessionDep
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
def get_budget(dataset_id: DatasetRef, principal: AdminKey, session: SessionDep) -> BudgetPublic:
    view = service.budget_view(session, tenant_id=principal.tenant_id, dataset_id=dataset_id)
    return BudgetPublic.from_view(view)


@router.get(
    _ONE + "/ledger.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}, "description": "The ledger as CSV."}},
    summary="The ledger as CSV, with the spend after each entry",
)
def get_ledger_csv(dataset_id: DatasetRef, principal: AdminKey, session: SessionDep) -> Response:
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
    "their warn threshold (for an alerting tool); all_tenants=true (org:read keys only): every "
    "tenant's",
)
def list_budgets(
    principal: BudgetReader,
    session: SessionDep,
    over_threshold: bool = False,
    all_tenants: bool = False,
) -> list[BudgetSummary]:
    _check_view(principal, all_tenants)
    if all_tenants:
        rows = fleet.fleet(session, over_threshold=over_threshold)
        return [BudgetSummary.from_row(f.row, f.tenant.name) for f in rows]
    tenant = principal.tenant_id
    if over_threshold:
        spends = service.over_threshold(session, tenant_id=tenant)
    else:
        spends = [r for r in service.overview(session, tenant_id=tenant) if r.budget is not None]
    name = session.get(Tenant, tenant)
    return [BudgetSummary.from_row(row, name.name if name else None) for row in spends]


def _check_view(principal: Principal, all_tenants: bool) -> None:
    """An admin key reads its own tenant only; an org:read key reads all tenants only."""
    if all_tenants and principal.scope is not KeyScope.ORG_READ:
        raise ForbiddenError(
            "all_tenants=true reads every tenant's budgets: it needs an 'org:read' key (created "
            f"by the operator); this {principal.scope.value!r} key sees its own tenant only",
            code="org_key_required",
        )
    if not all_tenants and principal.scope is KeyScope.ORG_READ:
        raise ForbiddenError(
            "an 'org:read' key reads budgets across tenants only: ask GET "
            "/v1/budgets?all_tenants=true",
            code="all_tenants_required",
        )


@router.get(
    "/v1/fleet/ledgers.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}, "description": "Every ledger as CSV."}},
    summary="Every tenant's ledgers as one CSV, with tenant and dataset columns (org:read keys)",
)
def get_fleet_ledgers(
    principal: OrgKey,
    session: SessionDep,
    tenant: Annotated[
        str | None,
        Query(max_length=100, description="One tenant's ledgers only (its ID or name)."),
    ] = None,
) -> Response:
    name = "ledgers-all-tenants.csv" if tenant is None else "ledgers-one-tenant.csv"
    return Response(
        content=fleet.fleet_ledgers(session, tenant),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
