"""Capacity: a bounded number of requests at once, and 503 + Retry-After past it.

Before this, every request was let in: with more clients than request threads,
all threads waited for a database connection while the requests holding the connections
waited for a thread to finish, until the pool's 30 s timeout answered 500 for half of them
and ``/healthz`` stopped answering. Now:

* :class:`AdmissionGate` lets ``max_concurrent_requests`` requests run at once (the database
  pools hold as many connections, so an admitted request never queues for one). Up to
  ``max_waiting_requests`` more wait at most ``admission_wait_s`` for a slot, first come
  first served; the rest, and those that waited in vain, get 503 ``overloaded`` with
  ``Retry-After`` at once, which costs the server almost nothing. ``/healthz`` is never
  gated, so probes see a live server even at capacity.
* The gate also sizes the thread pool that runs blocking handlers (``request_threads``), so
  that the pools and the threads agree.
* A connection that still cannot be had within ``db_pool_timeout_s`` (something outside the
  gate holds the pool: an in-process job, a long upload) answers the same 503 rather than a
  500 after 30 s.
* Requests that plan a job (submissions and quotes) first pass the planning lane in front of
  the gate (:mod:`app.api.planning_lane`): a waiting plan holds no slot and no thread, and
  the lane shares planning fairly between tenants.

It is plain ASGI middleware: a 503 is built without running the rest of the stack.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_response
from app.settings import Settings

OVERLOADED = "overloaded"
UNGATED_PATHS = frozenset({"/healthz"})
# The routes that plan a job before they answer: they queue in the planning lane.
PLANNING_ROUTES = frozenset(
    {
        ("POST", "/v1/jobs"),
        ("POST", "/v1/jobs/quote"),
        ("POST", "/ui/jobs"),
        ("POST", "/ui/jobs/quote"),
    }
)
PLANNING_FULL = "a job plan waited its longest for the planning lane: DPSYN_PLANNING_WAIT_S"


def plans_a_job(scope: Scope) -> bool:
    """Whether the request plans a job (a submission or a quote, the API's or the
    dashboard's)."""
    return (scope.get("method"), scope["path"].rstrip("/")) in PLANNING_ROUTES


def overloaded_response(retry_after_s: int, reason: str) -> JSONResponse:
    """The 503 of an overloaded server, in the service's error shape."""
    return error_response(
        503,
        OVERLOADED,
        f"the server is at capacity ({reason}); retry after {retry_after_s} s",
        {"Retry-After": str(retry_after_s)},
        retry_after_s=retry_after_s,
    )


class AdmissionGate:
    """Admit at most ``limit`` requests at once; up to ``max_waiting`` more wait at most
    ``wait_s``; everyone else gets 503 with Retry-After at once. ``limit=0`` admits all.
    ``admits`` picks the requests this gate is for (default: all but ``ungated`` paths);
    others pass straight through. ``reason`` goes into its 503's message.

    A slot is handed from a finishing request straight to the oldest waiter, so a waiter
    cannot be overtaken by a newcomer. State is per gate, touched only from the event loop.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        max_waiting: int,
        wait_s: float,
        retry_after_s: int,
        threads: int | None = None,
        ungated: Collection[str] = UNGATED_PATHS,
        admits: Callable[[Scope], bool] | None = None,
        reason: str = "too many requests in progress",
    ) -> None:
        self.app = app
        self.limit = limit
        self.max_waiting = max_waiting
        self.wait_s = wait_s
        self.threads = threads
        self.ungated = frozenset(ungated)
        self.admits = admits or (lambda scope: scope["path"] not in self.ungated)
        self.active = 0
        self.waiters: deque[anyio.Event] = deque()
        body = overloaded_response(retry_after_s, reason)
        self._reject_start = {
            "type": "http.response.start",
            "status": 503,
            "headers": body.raw_headers,
        }
        self._reject_body = {"type": "http.response.body", "body": body.body}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self._size_thread_pool()
        if self.limit <= 0 or not self.admits(scope):
            await self.app(scope, receive, send)
            return
        if not await self._admit():
            await send(self._reject_start)
            await send(self._reject_body)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._release()

    def _size_thread_pool(self) -> None:
        # The default limiter is per event loop, so it is checked on each request (an
        # integer comparison) rather than set once at start-up.
        if self.threads is not None:
            limiter = anyio.to_thread.current_default_thread_limiter()
            if limiter.total_tokens != self.threads:
                limiter.total_tokens = self.threads

    async def _admit(self) -> bool:
        if self.active < self.limit and not self.waiters:
            self.active += 1
            return True
        if len(self.waiters) >= self.max_waiting or self.wait_s <= 0:
            return False
        slot = anyio.Event()
        self.waiters.append(slot)
        try:
            with anyio.move_on_after(self.wait_s):
                await slot.wait()
        except BaseException:  # the client went away while waiting
            self._forget(slot)
            raise
        if slot.is_set():  # handed a slot (possibly just as the wait ran out)
            return True
        self.waiters.remove(slot)
        return False

    def _forget(self, slot: anyio.Event) -> None:
        if slot.is_set():
            self._release()  # it was handed a slot it will not use
        else:
            self.waiters.remove(slot)

    def _release(self) -> None:
        if self.waiters:
            self.waiters.popleft().set()  # the slot passes on; ``active`` is unchanged
        else:
            self.active -= 1


async def _pool_timeout(request: Request, _exc: Exception) -> JSONResponse:
    return overloaded_response(
        request.app.state.settings.retry_after_s, "no database connection free"
    )


def planning_lane_size(settings: Settings) -> int:
    """Submissions planned at once: the setting, kept below the main gate's limit so that
    planning never takes every slot (0: no lane)."""
    gate = settings.max_concurrent_requests or 0
    if gate <= 0 or settings.planning_concurrency <= 0:
        return settings.planning_concurrency
    return min(settings.planning_concurrency, max(1, gate - 1))


def install_overload_protection(app: FastAPI, settings: Settings) -> None:
    """Gate requests and answer pool timeouts with 503 (see the module docstring; the
    planning lane in front of the gate is :mod:`app.api.planning_lane`'s)."""
    app.add_middleware(
        AdmissionGate,
        limit=settings.max_concurrent_requests or 0,
        max_waiting=settings.max_waiting_requests,
        wait_s=settings.admission_wait_s,
        retry_after_s=settings.retry_after_s,
        threads=settings.request_threads,
    )
    app.add_exception_handler(PoolTimeoutError, _pool_timeout)
