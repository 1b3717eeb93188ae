"""Liveness with a database check, and Prometheus metrics (no API key; a metrics token
when per-dataset series are wanted).

``/healthz`` must answer while the API is at capacity (it queued behind the
requests it was meant to report on). It is not gated (``app.api.overload``), and its check
runs on a connection of its own, in a thread of its own, so neither the request threads nor
the request pools being busy can delay it; it fails 503 after ``HEALTH_TIMEOUT_S``.

Probes that come together share one check, and a check that succeeded less than
``HEALTH_FRESH_S`` ago answers the next probes at once (at 500 clients each probe
waited 1.2-1.8 s for a thread and the one connection). A failed check is never reused: the
next probe checks again.
"""

from __future__ import annotations

import asyncio
import hmac
import time

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from app.api.schemas import Health
from app.db.session import PoolLimits, get_engine
from app.services.errors import UnauthorizedError, UnavailableError

router = APIRouter(tags=["health"])

HEALTH_TIMEOUT_S = 5.0
# One connection, kept: probes come one at a time; concurrent ones wait for it briefly.
_HEALTH_POOL = PoolLimits(size=1, overflow=1, timeout_s=HEALTH_TIMEOUT_S)


def _ping(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


HEALTH_FRESH_S = 1.0


async def _check(engine: Engine) -> None:
    """One database check, or :class:`UnavailableError`."""
    try:
        with anyio.fail_after(HEALTH_TIMEOUT_S):
            # A limiter per call: never one of the (possibly all busy) request threads.
            await anyio.to_thread.run_sync(
                _ping, engine, abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1)
            )
    except TimeoutError:
        raise UnavailableError(
            f"database check took over {HEALTH_TIMEOUT_S:.0f} s", code="database_unavailable"
        ) from None
    except SQLAlchemyError as err:
        raise UnavailableError(
            f"the database is unavailable ({type(err).__name__}); retry later",
            code="database_unavailable",
        ) from None


async def _shared_check(request: Request) -> None:
    """The check in flight if there is one, else a fresh one (event loop only); skipped
    while the last success is fresh."""
    state = request.app.state
    if time.monotonic() - getattr(state, "health_ok_at", -HEALTH_FRESH_S) < HEALTH_FRESH_S:
        return
    running: asyncio.Future[None] | None = getattr(state, "health_check", None)
    if running is None or running.done():
        engine = get_engine(state.settings.database_url, readonly=True, pool=_HEALTH_POOL)
        running = state.health_check = asyncio.ensure_future(_check(engine))
        running.add_done_callback(lambda done: _checked(state, done))
    await asyncio.shield(running)  # a probe that goes away does not cancel the others'


def _checked(state: object, done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is None:
        state.health_ok_at = time.monotonic()  # type: ignore[attr-defined]


@router.get("/healthz", response_model=Health)
async def healthz(request: Request) -> Health:
    await _shared_check(request)
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
