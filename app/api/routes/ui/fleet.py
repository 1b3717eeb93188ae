"""The organisation's pages and the keys page.

``/ui/fleet``: for an ``org:read`` sign-in, every tenant's budgeted datasets -- spend against
budget, threshold state, newest job, jobs running and queued -- filtered by tenant and state
and sorted by any column on the server (:mod:`app.ui.tables`), with the all-ledgers CSV. It
reads :mod:`app.services.fleet` only: budgets, ledgers and job counts, never a record, a
prompt or a job's parameters, and it offers no form: an org key changes nothing.

``/ui/keys``: an admin sign-in's own tenant's keys, with their names and last use (read-only:
keys are created with ``dpsyn keys create`` or ``POST /v1/keys``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.api.deps import SessionDep
from app.api.routes.ui.session import AdminUi, OrgUi
from app.api.schemas import KeyPublic
from app.services import fleet as fleet_service
from app.services import tenants as tenant_service
from app.ui import job_list
from app.ui.render import page
from app.ui.tables import Choice, Column, TableSpec, TableView

LEVELS = ("ok", "warn", "over")


def fleet_spec(tenant_names: list[str]) -> TableSpec[dict[str, Any]]:
    """The fleet table: its sortable columns and its filters (the tenant's options are the
    tenants listed; query: tenant, level, sort, order)."""
    return TableSpec(
        columns=[
            Column("tenant", "Tenant", lambda r: r["tenant_name"].casefold()),
            Column("dataset", "Dataset", lambda r: r["dataset_name"].casefold()),
            Column("budget", "Budget ε", lambda r: r["budget"], True),
            Column("spent", "Spent ε", lambda r: r["spent"], True),
            Column("used", "Used", lambda r: r["fraction"], True),
            Column("level", "State", lambda r: LEVELS.index(r["level"]), True),
            Column("last_job", "Last job", lambda r: r["last_job_at"], True),
            Column("running", "Running", lambda r: r["running"], True),
        ],
        filters=[
            Choice("tenant", "Tenant", tenant_names, lambda r: r["tenant_name"]),
            Choice("level", "State", LEVELS, lambda r: r["level"]),
        ],
    )


def fleet_table(session: Session, params: Mapping[str, str]) -> TableView[dict[str, Any]]:
    """The fleet page's rows (by tenant, newest dataset first, until sorted), filtered and
    sorted as the query asks (an unknown value: 422)."""
    rows: list[dict[str, Any]] = []
    for found in fleet_service.fleet(session):
        spend, budget = found.row.spend, found.row.budget
        assert spend is not None and budget is not None  # budgeted rows only
        rows.append(
            {
                "tenant_id": found.tenant.id,
                "tenant_name": found.tenant.name,
                "tenant_disabled": found.tenant.disabled_at is not None,
                "dataset_id": found.row.dataset.id,
                "dataset_name": found.row.dataset.name,
                "budget": budget.epsilon,
                "spent": spend.epsilon,
                "counts": spend.counts_epsilon,  # the count release's part, charged once
                "fraction": found.row.fraction or 0.0,
                "warn_threshold": budget.warn_threshold,
                "level": str(found.row.level or "ok"),
                "last_job_at": found.jobs.last_job_at,
                "running": found.jobs.running,
                "queued": found.jobs.queued,
                # budgets follow the records: whose budget it charges, who shares it
                "budget_owner": budget.dataset_id,
                "linked": list(found.row.linked),
            }
        )
    _name_shared_budgets(rows)
    names = sorted({str(r["tenant_name"]) for r in rows}, key=str.casefold)
    return fleet_spec(names).apply(rows, params)


def _name_shared_budgets(rows: list[dict[str, Any]]) -> None:
    """Add the names of the datasets a row's budget is shared with (its owner, the datasets
    linked to it), so that the page names them rather than print their IDs. Datasets that
    share a budget are all budgeted, so all are rows; an ID missing from them stays an ID."""
    names = {r["dataset_id"]: r["dataset_name"] for r in rows}
    for row in rows:
        row["budget_owner_name"] = names.get(row["budget_owner"])
        row["linked_names"] = [(i, names.get(i)) for i in row["linked"]]


def register(router: APIRouter) -> None:
    """Add these pages to the dashboard's router (its route class answers errors as pages)."""

    @router.get("/fleet", response_class=HTMLResponse)
    def fleet_page(request: Request, ui: OrgUi, session: SessionDep) -> Response:
        """Every tenant's budgets (org:read sign-ins only)."""
        table = fleet_table(session, request.query_params)
        return page(
            request, "fleet.html", ui, table=table, rows=table.rows, when=job_list.when_text
        )

    @router.get("/fleet/ledgers.csv")
    def fleet_ledgers(ui: OrgUi, session: SessionDep) -> Response:
        """Every ledger of every tenant (as ``GET /v1/fleet/ledgers.csv``)."""
        return Response(
            content=fleet_service.fleet_ledgers(session),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="ledgers-all-tenants.csv"'},
        )

    @router.get("/keys", response_class=HTMLResponse)
    def keys_page(request: Request, ui: AdminUi, session: SessionDep) -> Response:
        """The tenant's keys with their names and last use (as ``GET /v1/keys``)."""
        keys = tenant_service.list_keys(session, ui.principal.tenant_id)
        return page(request, "keys.html", ui, keys=[KeyPublic.from_row(k) for k in keys])
