"""Liveness with a database check, and Prometheus metrics (no API key; a metrics token
when per-dataset series are wanted)."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import SessionDep
from app.api.schemas import Health
from app.services.errors import UnauthorizedError, UnavailableError

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> Health:
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as err:
        raise UnavailableError(
            f"the database is unavailable ({type(err).__name__}); retry later",
            code="database_unavailable",
        ) from None
    return Health(status="ok", database="reachable")


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus text format",
    description="Without DPSYN_METRICS_TOKEN: open, aggregates only (jobs by status, tokens). "
    "With it: needs `Authorization: Bearer <metrics token>` and adds the per-dataset budget "
    "and spend series (tenant and dataset IDs).",
)
def metrics(request: Request) -> Response:
    token = request.app.state.settings.metrics_token
    if token is not None:
        sent = request.headers.get("authorization", "")
        scheme, _, value = sent.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), token.encode()
        ):
            raise UnauthorizedError(
                "/metrics needs the metrics token (DPSYN_METRICS_TOKEN) as a bearer token",
                code="unauthorized",
            )
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
