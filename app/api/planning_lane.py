"""The planning lane: requests that plan a job, fair between tenants.

A job's plan (its noise calibration, AdaDPSyn's planner) takes from milliseconds (a shape
seen before) to seconds (a new one). Quotes and submissions plan before they answer, so a
burst of them once held every request slot: 16 quotes from one tenant made another tenant's
``GET /v1/datasets`` answer 503 for 68 of 95 requests. The lane sits in front of
the main gate (``app.api.overload``), so a request waiting here holds no slot and no thread:

* at most ``limit`` plans run at once in the process (below the main gate's limit), and at
  most ``per_tenant`` of them for one tenant, so a tenant's burst delays that tenant only;
* a tenant's requests past its share wait, at most ``tenant_queue`` of them; one more is
  answered **429** ``planning_busy`` with Retry-After at once (the tenant's own share is
  full, not the server);
* a freed slot goes to the tenants with waiters in turn (round robin), each tenant's own
  requests first come first served; a request that waited ``wait_s`` in vain gets 503.

The tenant is the caller's key's (a bearer key checked as ``get_principal`` checks it, with
the failure limit counted first; a dashboard session's key). A request that names no key, or
whose key cannot be checked now (the database is down), passes through, and its route
answers 401, the sign-in page or 503 ``database_unavailable``.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable
from enum import Enum

import anyio
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_response
from app.api.overload import PLANNING_FULL, overloaded_response, planning_lane_size, plans_a_job
from app.settings import Settings

PLANNING_BUSY = "planning_busy"


class Outcome(Enum):
    STARTED = "started"
    TENANT_FULL = "tenant_full"
    TIMED_OUT = "timed_out"


#: Finds the request's tenant (None: no key named) or answers for it (an invalid key: 401).
TenantOf = Callable[[Request], Awaitable["str | Response | None"]]


class PlanningLane:
    """ASGI middleware: requests picked by ``admits`` run under the lane's limits (module
    docstring); others pass straight through. State is touched from the event loop only."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        per_tenant: int,
        tenant_queue: int,
        wait_s: float,
        retry_after_s: int,
        admits: Callable[[Scope], bool],
        tenant_of: TenantOf,
        on_timeout: Callable[[], Response],
    ) -> None:
        self.app = app
        self.limit, self.per_tenant = limit, max(1, min(per_tenant, limit or per_tenant))
        self.tenant_queue, self.wait_s = tenant_queue, wait_s
        self.retry_after_s = retry_after_s
        self.admits, self.tenant_of, self.on_timeout = admits, tenant_of, on_timeout
        self.running = 0
        self.running_by: Counter[str] = Counter()
        # Tenants with waiters, in the order they are next served (round robin).
        self.waiting: OrderedDict[str, deque[anyio.Event]] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.limit <= 0 or not self.admits(scope):
            await self.app(scope, receive, send)
            return
        try:
            tenant = await self.tenant_of(Request(scope, receive))
        except Exception:  # the database is down: the route answers for it
            tenant = None
        if isinstance(tenant, Response):
            await tenant(scope, receive, send)
            return
        if tenant is None:
            await self.app(scope, receive, send)
            return
        outcome = await self._admit(tenant)
        if outcome is Outcome.TENANT_FULL:
            await self._busy(tenant)(scope, receive, send)
            return
        if outcome is Outcome.TIMED_OUT:
            await self.on_timeout()(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._release(tenant)

    def _busy(self, tenant: str) -> Response:
        return error_response(
            429,
            PLANNING_BUSY,
            f"this tenant already has {self.running_by[tenant]} job plan(s) in progress and "
            f"{len(self.waiting.get(tenant, ()))} waiting, its share of the server's planning "
            f"(DPSYN_PLANNING_PER_TENANT, DPSYN_PLANNING_TENANT_QUEUE); retry after "
            f"{self.retry_after_s} s",
            {"Retry-After": str(self.retry_after_s)},
            retry_after_s=self.retry_after_s,
        )

    def _can_start(self, tenant: str) -> bool:
        return self.running < self.limit and self.running_by[tenant] < self.per_tenant

    def _start(self, tenant: str) -> None:
        self.running += 1
        self.running_by[tenant] += 1

    async def _admit(self, tenant: str) -> Outcome:
        if tenant not in self.waiting and self._can_start(tenant):
            self._start(tenant)
            return Outcome.STARTED
        queue = self.waiting.get(tenant)
        if queue is None:
            queue = self.waiting[tenant] = deque()
        if len(queue) >= self.tenant_queue or self.wait_s <= 0:
            self._forget_empty(tenant)
            return Outcome.TENANT_FULL
        slot = anyio.Event()
        queue.append(slot)
        try:
            with anyio.move_on_after(self.wait_s):
                await slot.wait()
        except BaseException:  # the client went away while waiting
            self._leave(tenant, slot)
            raise
        if slot.is_set():  # handed a slot (possibly just as the wait ran out)
            return Outcome.STARTED
        self._leave(tenant, slot)
        return Outcome.TIMED_OUT

    def _leave(self, tenant: str, slot: anyio.Event) -> None:
        if slot.is_set():
            self._release(tenant)  # it was handed a slot it will not use
            return
        queue = self.waiting.get(tenant)
        if queue is not None and slot in queue:
            queue.remove(slot)
        self._forget_empty(tenant)

    def _forget_empty(self, tenant: str) -> None:
        if tenant in self.waiting and not self.waiting[tenant]:
            del self.waiting[tenant]

    def _release(self, tenant: str) -> None:
        self.running -= 1
        self.running_by[tenant] -= 1
        if self.running_by[tenant] <= 0:
            del self.running_by[tenant]
        self._hand_out()

    def _hand_out(self) -> None:
        """Give free slots to waiting tenants in turn; a tenant served goes to the back."""
        while self.running < self.limit:
            tenant = next((t for t in self.waiting if self._can_start(t)), None)
            if tenant is None:
                return
            queue = self.waiting[tenant]
            slot = queue.popleft()
            self._start(tenant)
            slot.set()
            if queue:
                self.waiting.move_to_end(tenant)
            else:
                del self.waiting[tenant]


def install_planning_lane(app: FastAPI, settings: Settings, tenant_of: TenantOf) -> None:
    """Put the lane in front of every middleware added before it (the main gate's)."""
    app.add_middleware(
        PlanningLane,
        limit=planning_lane_size(settings),
        per_tenant=settings.planning_per_tenant,
        tenant_queue=settings.planning_tenant_queue,
        wait_s=settings.planning_wait_s,
        retry_after_s=settings.retry_after_s,
        admits=plans_a_job,
        tenant_of=tenant_of,
        on_timeout=lambda: overloaded_response(settings.retry_after_s, PLANNING_FULL),
    )
