"""Liveness with a database check, and Prometheus metrics (no API key needed)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import SessionDep
from app.api.schemas import Health
from app.services.errors import UnavailableError

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> Health:
    try:
        session.execute(text("SELECT 1"))
    except SQLAlchemyError as err:
        raise UnavailableError(
            f"database unreachable ({type(err).__name__})", code="database_unreachable"
        ) from None
    return Health(status="ok", database="reachable")


@router.get("/metrics", response_class=Response, summary="Prometheus text format")
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
