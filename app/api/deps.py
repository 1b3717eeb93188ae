"""Request dependencies: the database session and the caller's API key.

``SessionDep`` is one session per request; services commit explicitly, and whatever is not
committed is rolled back when the request ends. ``AdminKey`` admits only ``admin`` keys;
``AnyKey`` also ``prompts:read`` keys (for the prompt routes). Both carry the tenant, which
every service call is scoped to, and both apply the rate limits of :mod:`app.api.limits`
(the key's own, and its client address's failed checks).

Connections are held as briefly as the handlers allow (issue 10: under load every request
thread waited for a connection that finished requests could not give back, because giving it
back needed a thread too). The session is made on the event loop (that takes no connection;
the first query does) and closed there unless it holds one; authentication runs on a session
of its own that returns its connection before the route starts.

A successful key lookup is remembered for a few seconds (:mod:`app.services.key_cache`: at
most ``KEY_TTL_S`` after a revocation made by another process; one made by this process,
e.g. ``DELETE /v1/keys/{id}``, takes effect at once), so that a prompt read by a known key
costs no thread hop and no query. Failed lookups are never remembered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from app.api.limits import Limiter, client_address
from app.db.models import KeyScope
from app.llm.provider import BackendProvider
from app.services import key_cache
from app.services.advice import AdviceRunner
from app.services.errors import ForbiddenError, UnauthorizedError
from app.services.key_cache import CachedKey, KeyCache
from app.services.queue import JobQueue
from app.services.tenants import authenticate, hash_key
from app.settings import Settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    # GET requests never write: on SQLite they use an engine whose transactions do not take
    # the write lock, so reads do not queue behind jobs and admissions.
    factory = request.app.state.read_sessions if request.method == "GET" else None
    session = (factory or request.app.state.sessions)()
    try:
        yield session
    finally:
        if session.in_transaction():
            # Closing it does I/O (the rollback), so in a thread, but never one of the request
            # threads: they may all be busy with requests that need this very connection
            # (a limiter of its own per call, as FastAPI exits sync dependencies).
            await anyio.to_thread.run_sync(_close, session, limiter=CapacityLimiter(1))
        else:
            session.close()  # no connection held: nothing to roll back, no I/O


def _close(session: Session) -> None:
    session.rollback()
    session.close()


# scope="function": closed when the handler's response is built, not after it is sent.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` dependency in
# a request thread, a hop that costs time and, under load, a wait for a free thread.


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_queue(request: Request) -> JobQueue:
    return request.app.state.queue


async def get_provider(request: Request) -> BackendProvider:
    return request.app.state.backend_provider


async def get_advice_runner(request: Request) -> AdviceRunner:
    return request.app.state.advice


SettingsDep = Annotated[Settings, Depends(get_settings)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
ProviderDep = Annotated[BackendProvider, Depends(get_provider)]
AdviceDep = Annotated[AdviceRunner, Depends(get_advice_runner)]

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key: `Authorization: Bearer <key>`. Admin keys can do everything "
    "for their tenant; prompts:read keys can only read prompts and complete with them.",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's tenant and scope."""

    tenant_id: str
    key_id: str
    scope: KeyScope


def _authenticate(sessions: sessionmaker[Session], raw_key: str) -> Principal | None:
    """Look the key up on a session of its own, closed (its connection returned) at once."""
    with sessions() as session:
        key = authenticate(session, raw_key)
        if key is None:
            return None
        return Principal(tenant_id=key.tenant_id, key_id=key.id, scope=KeyScope(key.scope))


def key_lookups(app: FastAPI) -> KeyCache:
    """The app's key-lookup cache (one per app: tests run several apps on several databases
    in one process, and a key's hash must never resolve against another app's database)."""
    cache: KeyCache | None = getattr(app.state, "key_cache", None)
    if cache is None:
        cache = app.state.key_cache = KeyCache()
    return cache


async def _lookup(request: Request, raw_key: str) -> Principal | None:
    """The key's principal: from the cache, else from the database (then remembered).

    A remembered key past half its life is renewed by one background lookup while it is
    still served, and concurrent misses of one key wait for one lookup
    (:meth:`KeyCache.get_fresh`); the staleness bound after a revocation elsewhere is the
    same ``KEY_TTL_S``, since no entry is served past it."""
    cache = key_lookups(request.app)
    digest = hash_key(raw_key)
    cached, renew = cache.get_fresh(digest)
    if cached is not None:
        if renew:
            _shared_lookup(request.app, digest, raw_key)  # in the background, once
        return Principal(tenant_id=cached.tenant_id, key_id=cached.key_id, scope=cached.scope)
    # Shielded: a request that goes away (cancelled) must not cancel the others' lookup.
    return await asyncio.shield(_shared_lookup(request.app, digest, raw_key))


def _shared_lookup(app: FastAPI, digest: str, raw_key: str) -> asyncio.Future[Principal | None]:
    """The one lookup of ``digest`` in flight, started if there is none (event loop only)."""
    inflight: dict[str, asyncio.Future[Principal | None]] | None = getattr(
        app.state, "key_lookups_in_flight", None
    )
    if inflight is None:
        inflight = app.state.key_lookups_in_flight = {}
    running = inflight.get(digest)
    if running is None:
        running = inflight[digest] = asyncio.ensure_future(_database_lookup(app, digest, raw_key))
        running.add_done_callback(lambda done: _lookup_done(inflight, digest, done))
    return running


def _lookup_done(
    inflight: dict[str, asyncio.Future[Principal | None]],
    digest: str,
    done: asyncio.Future[Principal | None],
) -> None:
    """Forget the finished lookup; a background renewal's failure (the database down) is
    read here so that it is not reported as never retrieved: the entry simply expires."""
    inflight.pop(digest, None)
    if not done.cancelled():
        done.exception()


async def _database_lookup(app: FastAPI, digest: str, raw_key: str) -> Principal | None:
    """Look the key up and remember the answer (or forget the key if it no longer opens the
    API). Shared by the requests that wait for it (shielded from their cancellation)."""
    cache = key_lookups(app)
    generation = key_cache.generation()  # read before the lookup: see KeyCache.put
    # The read-only sessions: on SQLite a key lookup never takes the write lock, whatever
    # the request's method.
    principal = await run_in_threadpool(_authenticate, app.state.read_sessions, raw_key)
    if principal is None:
        cache.discard(digest)
    else:
        cache.put(digest, CachedKey(principal.tenant_id, principal.key_id, principal.scope),
                  generation)  # fmt: skip
    return principal


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    # Rates are counted for what is known, never for what is presented (app.api.limits): an
    # address that failed too often is refused before its key costs a lookup (each attempt
    # is counted first, and given back if the key checks out), and a key's bucket is spent
    # only once the key has checked out, under its ID.
    limiter: Limiter = request.app.state.limiter
    address = client_address(request.scope)
    await limiter.attempt(limiter.auth_failures, address)
    principal = await _lookup(request, credentials.credentials)
    if principal is None:
        raise UnauthorizedError("invalid or revoked API key")
    await limiter.succeeded(limiter.auth_failures, address)
    await limiter.charge(limiter.key, principal.key_id)
    return principal


async def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.scope is not KeyScope.ADMIN:
        raise ForbiddenError(
            f"this API key has scope {principal.scope.value!r}: it can only read prompts "
            "and complete with them; this endpoint needs an 'admin' key",
            code="insufficient_scope",
        )
    return principal


AnyKey = Annotated[Principal, Depends(get_principal)]
AdminKey = Annotated[Principal, Depends(require_admin)]
