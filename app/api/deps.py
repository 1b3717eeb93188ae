"""Request dependencies: the database session and the caller's API key.

``SessionDep`` is one session per request; services commit explicitly, and whatever is not
committed is rolled back when the request ends. ``AdminKey`` admits only ``admin`` keys;
``AnyKey`` also ``prompts:read`` keys (for the prompt routes). Both carry the tenant, which
every service call is scoped to, and both apply the rate limits of :mod:`app.api.limits`
(the key's own, and its client address's failed checks). Neither admits an ``org:read`` key:
it reads every tenant's budgets through the routes that ask for ``OrgKey`` or
``BudgetReader`` and nothing else, so every other route answers it 403.

Authentication records the key's last use (``api_keys.last_used_at``) at most once a minute
per key (:class:`app.services.key_cache.LastUsedThrottle`), in the background: a request
never waits for that write, and a key served from the cache writes no more often.

Connections are held as briefly as the handlers allow (under load every request
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
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.api.errors import error_response
from app.api.limits import Limiter, RateLimitedError, client_address
from app.db.models import ApiKey, KeyScope, now
from app.llm.provider import BackendProvider
from app.services import key_cache
from app.services.advice import AdviceRunner
from app.services.datasets import resolve_ref
from app.services.errors import ForbiddenError, UnauthorizedError
from app.services.key_cache import CachedKey, KeyCache
from app.services.queue import JobQueue
from app.services.tenants import (
    authenticate,
    hash_key,
    live_keys_by_hash,
    recently_used_keys,
    touch_last_used,
)
from app.settings import Settings

logger = logging.getLogger(__name__)


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
    "for their tenant; prompts:read keys can only read prompts and complete with them; "
    "org:read keys (created by the operator) only read every tenant's budgets "
    "(GET /v1/budgets?all_tenants=true, GET /v1/fleet/ledgers.csv).",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's tenant and scope."""

    tenant_id: str
    key_id: str
    scope: KeyScope


def principal_of(key: ApiKey | None) -> Principal | None:
    """The caller a live key (from a bearer token or a browser session) stands for; None for
    no key. Read while the key's database session is open."""
    if key is None:
        return None
    return Principal(tenant_id=key.tenant_id, key_id=key.id, scope=KeyScope(key.scope))


def _authenticate(sessions: sessionmaker[Session], raw_key: str) -> Principal | None:
    """Look the key up on a session of its own, closed (its connection returned) at once."""
    with sessions() as session:
        return principal_of(authenticate(session, raw_key))


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


async def authenticate_key(request: Request, raw_key: str) -> Principal:
    """The live key ``raw_key`` stands for, or :class:`UnauthorizedError`.

    Rates are counted for what is known, never for what is presented (app.api.limits): an
    address that failed too often is refused (:class:`RateLimitedError`) before its key
    costs a lookup; each attempt is counted first and given back if the key checks out."""
    limiter: Limiter = request.app.state.limiter
    address = client_address(request.scope)
    await limiter.attempt(limiter.auth_failures, address)
    principal = await _lookup(request, raw_key)
    if principal is None:
        raise UnauthorizedError("invalid or revoked API key")
    await limiter.succeeded(limiter.auth_failures, address)
    return principal


async def bearer_tenant(request: Request) -> str | Response | None:
    """The planning lane's tenant of an API request (``app.api.planning_lane``): its bearer
    key's, checked as :func:`get_principal` checks it; the refusal itself for a key that
    does not check out (401, or 429 past the address's failure limit); None without one."""
    scheme, _, raw_key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw_key.strip():
        return None
    try:
        return (await authenticate_key(request, raw_key.strip())).tenant_id
    except UnauthorizedError as err:
        return error_response(401, err.error_code, err.message, {"WWW-Authenticate": "Bearer"})
    except RateLimitedError as err:
        return err.response()


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The live key of the request, whatever its scope (the routes' dependencies below check
    the scope); its use is recorded (:func:`note_key_used`)."""
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    principal = await authenticate_key(request, credentials.credentials)
    # A key's bucket is spent only once the key has checked out, under its ID.
    limiter: Limiter = request.app.state.limiter
    await limiter.charge(limiter.key, principal.key_id)
    note_key_used(request.app, principal.key_id)
    return principal


# --- the remembered keys, renewed together ----------------------------------------

#: How often a process looks every key it remembers up again, in one query per 500 keys:
#: well within ``KEY_TTL_S``, so that a remembered key never expires under its traffic and
#: no request waits for (or starts) a lookup of a known key. A read mix over 1,000 keys
#: (bench/load.py --mix) renewed each key on its own before, a query on a request thread
#: for most requests.
KEY_RENEW_S = 2.0


async def renew_keys_forever(app: FastAPI) -> None:
    """The process's key renewal (started by the app's lifespan, cancelled when it ends);
    its first round also loads the most recently used live keys, so that a starting process
    answers them without a lookup each. A failed round (the database down) is logged by
    kind; the keys then expire after ``KEY_TTL_S`` as they did before."""
    preload = True
    while True:
        try:
            await run_in_threadpool(_renew_keys, app, preload)
            preload = False
        except SQLAlchemyError as error:
            logger.warning("could not renew the remembered keys (%s)", type(error).__name__)
        await asyncio.sleep(KEY_RENEW_S)


def _renew_keys(app: FastAPI, preload: bool) -> None:
    cache = key_lookups(app)
    generation = key_cache.generation()  # read before the lookup: see KeyCache.renew
    asked = cache.hashes()
    with app.state.read_sessions() as session:
        rows = list(live_keys_by_hash(session, asked).values())
        if preload:
            rows += recently_used_keys(session, max(0, key_cache.KEY_CACHE_SIZE - len(asked)))
        live = {row.key_hash: CachedKey(row.tenant_id, row.id, KeyScope(row.scope)) for row in rows}
    cache.renew(live, asked, generation)


# --- last use ---------------------------------------------------------------------


#: Uses of keys due to be written are gathered for this long and written in one statement:
#: a read mix over many keys (bench/load.py --mix) wrote a row per key before, each a SQLite
#: write transaction on the request path's threads.
LAST_USED_BATCH_S = 1.0


def note_key_used(app: FastAPI, key_id: str) -> None:
    """Record that ``key_id`` was used, if this process has not written its time within the
    last minute (:class:`app.services.key_cache.LastUsedThrottle`, kept on the app's key cache
    so that it outlives the cached lookups). The write runs in the background: no request waits
    for it, and on SQLite none queues behind a job's write lock for it (event loop only). The
    keys due within :data:`LAST_USED_BATCH_S` are written together, by one UPDATE (a batch
    still pending when the process stops is lost: at most that long of last-use times)."""
    if not key_lookups(app).last_used.due(key_id):
        return
    batch: set[str] | None = getattr(app.state, "last_used_batch", None)
    if batch is None:
        batch = app.state.last_used_batch = set()
    batch.add(key_id)
    if len(batch) > 1:
        return  # the batch's write is already on its way
    pending: set[asyncio.Future[None]] | None = getattr(app.state, "last_used_writes", None)
    if pending is None:
        pending = app.state.last_used_writes = set()
    write = asyncio.ensure_future(_write_batch_later(app, batch))
    pending.add(write)  # held until done: a task nobody references may be collected
    write.add_done_callback(pending.discard)


async def _write_batch_later(app: FastAPI, batch: set[str]) -> None:
    await asyncio.sleep(LAST_USED_BATCH_S)
    key_ids = sorted(batch)
    batch.clear()  # the next use due starts a new batch
    await run_in_threadpool(_write_last_used, app, key_ids)


def _write_last_used(app: FastAPI, key_ids: list[str]) -> None:
    """The throttled write; a failure (database down) is logged by kind and dropped: the next
    use after the interval writes again. Never raises into the event loop."""
    try:
        with app.state.sessions() as session:
            touch_last_used(session, key_ids, now())
    except SQLAlchemyError as error:
        logger.warning("could not record the last use of %d keys (%s)", len(key_ids),
                       type(error).__name__)  # fmt: skip


# --- scopes ----------------------------------------------------------------------------------

_ORG_ONLY = (
    "this API key has scope 'org:read': it reads every tenant's budgets (GET "
    "/v1/budgets?all_tenants=true, GET /v1/fleet/ledgers.csv) and nothing else"
)


def _scope_refusal(scope: KeyScope, needed: str) -> ForbiddenError:
    """The 403 of a key whose scope does not open a route, naming what it can do instead."""
    if scope is KeyScope.ORG_READ:
        what = _ORG_ONLY
    else:
        what = (
            f"this API key has scope {scope.value!r}: it can only read prompts and complete "
            "with them"
        )
    return ForbiddenError(f"{what}; this endpoint needs {needed}", code="insufficient_scope")


async def require_tenant_key(
    principal: Annotated[Principal, Depends(get_principal)],
) -> Principal:
    """A key of one tenant (admin or prompts:read): never an org:read key."""
    if principal.scope is KeyScope.ORG_READ:
        raise _scope_refusal(principal.scope, "a tenant's 'admin' or 'prompts:read' key")
    return principal


async def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.scope is not KeyScope.ADMIN:
        raise _scope_refusal(principal.scope, "an 'admin' key")
    return principal


async def require_org(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """An org:read key: the routes that read across tenants (read-only)."""
    if principal.scope is not KeyScope.ORG_READ:
        raise ForbiddenError(
            f"this endpoint reads every tenant's budgets: it needs an 'org:read' key (created "
            f"by the operator); this {principal.scope.value!r} key sees its own tenant only",
            code="org_key_required",
        )
    return principal


async def require_budget_reader(
    principal: Annotated[Principal, Depends(get_principal)],
) -> Principal:
    """An admin key (its own tenant's budgets) or an org:read key (every tenant's): the
    route itself checks that each asks the view its scope allows."""
    if principal.scope not in (KeyScope.ADMIN, KeyScope.ORG_READ):
        raise _scope_refusal(principal.scope, "an 'admin' key (or an 'org:read' key)")
    return principal


#: The dependencies that refuse a key for its scope (a 403 in the OpenAPI document).
SCOPE_CHECKS = (require_tenant_key, require_admin, require_org, require_budget_reader)

AnyKey = Annotated[Principal, Depends(require_tenant_key)]
AdminKey = Annotated[Principal, Depends(require_admin)]
OrgKey = Annotated[Principal, Depends(require_org)]
BudgetReader = Annotated[Principal, Depends(require_budget_reader)]


def dataset_ref(dataset_id: str, principal: AdminKey, session: SessionDep) -> str:
    """The ``{dataset_id}`` path parameter resolved to an ID: a dataset's ID or its unique
    name within the tenant (``app.services.datasets.resolve_ref``)."""
    return resolve_ref(session, principal.tenant_id, dataset_id)


#: A route's ``{dataset_id}``: the ID, or the dataset's unique name.
DatasetRef = Annotated[str, Depends(dataset_ref)]
