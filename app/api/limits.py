"""Rate limits: the rates of keys and of failed authentications.

The checks of a request's path, query and body size, which come before any rate, are
:mod:`app.api.request_checks`'s.

Rates are token buckets (``per_minute`` a minute, ``burst`` at once; past them 429
``rate_limited`` with ``Retry-After`` and the limit's name), counted by :class:`Limiter` where
the caller is known, never for what a request merely presents (a bucket per
presented token let 10,001 fake keys, each a database lookup, evict a real key's bucket):

* ``key``: each authenticated API key, by key ID, on the API and the dashboard alike
  (``DPSYN_RATE_LIMIT_PER_MINUTE``, off by default). Buckets exist only for keys that
  authenticated, so their number is bounded by the keys, and a full bucket is forgotten.
* ``model_calls``: the dashboard's model calls per key, on top of ``key``
  (``DPSYN_UI_MODEL_CALLS_PER_MINUTE``).
* ``auth_failures`` and ``signin_failures``: failed API-key checks and failed dashboard
  sign-ins per client address (``DPSYN_AUTH_FAILURES_PER_MINUTE``,
  ``DPSYN_SIGNIN_FAILURES_PER_MINUTE``). An address over its limit gets 429 *before* its key
  is looked up, so a flood of fake keys costs no database work. These tables hold at most
  ``MAX_ADDRESSES`` addresses each (the least recently failing is forgotten first); they are
  apart from the keys' buckets, so no flood can evict or reset a key's.

The buckets live in Redis when one is configured (``DPSYN_LIMITS_REDIS_URL``, else a Redis
``DPSYN_BROKER_URL``), so every API process counts against the same limit; an atomic script
updates a bucket, on Redis's clock, and the bucket expires once it would be full again. The
embedded mode (no Redis) counts in memory, per process. If Redis cannot be reached, each
process counts in memory until it can (a warning is logged), rather than failing requests.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError
from starlette.types import Scope

from app.api.errors import error_response
from app.settings import Settings

log = logging.getLogger(__name__)

MAX_ADDRESSES = 10_000  # addresses remembered per failure limit, in memory
REDIS_TIMEOUT_S = 0.5  # a Redis that answers slower than this counts as down
REDIS_RETRY_S = 5.0  # how long a process counts in memory after Redis failed


@dataclass(frozen=True)
class Rule:
    """One rate limit: ``per_minute`` a minute, up to ``burst`` at once. ``per_address``
    rules count failures of client addresses (bounded tables); the others authenticated keys."""

    name: str  # the error's ``limit`` field and the buckets' namespace
    per_minute: int
    burst: int
    setting: str  # the variable a refusal names
    what: str  # what is counted, for the refusal's message
    per_address: bool = False

    @property
    def rate(self) -> float:
        """Tokens per second."""
        return self.per_minute / 60.0

    @property
    def refill_s(self) -> float:
        """Seconds after which an untouched bucket is full again (and can be forgotten)."""
        return self.burst / self.rate


class RateLimitedError(Exception):
    """A request over ``rule``; answered 429 with Retry-After (API) or an error page (UI)."""

    def __init__(self, rule: Rule, wait_s: float) -> None:
        self.rule = rule
        self.retry_after_s = max(1, math.ceil(wait_s))
        self.message = (
            f"too many {rule.what}: at most {rule.per_minute} per minute ({rule.setting}); "
            f"retry in {self.retry_after_s} s"
        )
        super().__init__(self.message)

    def response(self) -> JSONResponse:
        return error_response(
            429,
            "rate_limited",
            self.message,
            {"Retry-After": str(self.retry_after_s)},
            retry_after=self.retry_after_s,
            limit=self.rule.name,
        )


class Buckets(Protocol):
    """Where buckets are kept. ``take`` spends one token and answers 0, or, with none left,
    spends nothing and answers the seconds until one is back; ``give_back`` returns one
    token taken for an attempt that turned out not to count."""

    kind: str

    async def take(self, rule: Rule, subject: str) -> float: ...

    async def give_back(self, rule: Rule, subject: str) -> None: ...

    def sizes(self) -> dict[str, int]: ...


class MemoryBuckets:
    """Buckets of this process: one table per rule, oldest touch first. A full bucket is the
    same as none, so it is dropped: when it is given its last token back, or once untouched
    for ``rule.refill_s``. A per-address table past ``max_addresses`` also drops its least
    recently touched address."""

    kind = "memory"

    def __init__(self, max_addresses: int = MAX_ADDRESSES) -> None:
        self.max_addresses = max_addresses
        self._tables: dict[str, OrderedDict[str, tuple[float, float]]] = {}
        self._lock = threading.Lock()

    async def take(self, rule: Rule, subject: str) -> float:
        return self.take_at(rule, subject, time.monotonic())

    async def give_back(self, rule: Rule, subject: str) -> None:
        self.give_back_at(rule, subject, time.monotonic())

    def _table(self, rule: Rule, now: float) -> OrderedDict[str, tuple[float, float]]:
        table = self._tables.setdefault(rule.name, OrderedDict())
        while table and now - next(iter(table.values()))[1] >= rule.refill_s:
            table.popitem(last=False)  # full again: forget it
        return table

    def _tokens(self, rule: Rule, table: OrderedDict, subject: str, now: float) -> float:
        tokens, at = table.pop(subject, (float(rule.burst), now))
        return float(min(float(rule.burst), tokens + (now - at) * rule.rate))

    def take_at(self, rule: Rule, subject: str, now: float) -> float:
        with self._lock:
            table = self._table(rule, now)
            tokens = self._tokens(rule, table, subject, now)
            wait = 0.0 if tokens >= 1 else (1 - tokens) / rule.rate
            table[subject] = (tokens - 1 if wait == 0 else tokens, now)
            if rule.per_address and len(table) > self.max_addresses:
                table.popitem(last=False)
            return wait

    def give_back_at(self, rule: Rule, subject: str, now: float) -> None:
        with self._lock:
            table = self._table(rule, now)
            if subject in table:
                tokens = self._tokens(rule, table, subject, now) + 1
                if tokens < rule.burst:
                    table[subject] = (tokens, now)

    def sizes(self) -> dict[str, int]:
        """Buckets held per rule (rules with none left out)."""
        with self._lock:
            return {name: len(table) for name, table in self._tables.items() if table}


# KEYS[1]: the bucket; ARGV: tokens per second, burst, 1 to take a token or -1 to give one
# back. Returns the seconds to wait as a string (Lua numbers become integers in replies).
_BUCKET_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]), tonumber(state[2])
if tokens == nil or at == nil then
  if ARGV[3] ~= '1' then
    return '0'
  end
  tokens, at = burst, now
end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
if ARGV[3] == '1' then
  if tokens < 1 then
    return tostring((1 - tokens) / rate)
  end
  tokens = tokens - 1
else
  tokens = tokens + 1
  if tokens >= burst then
    redis.call('DEL', KEYS[1])
    return '0'
  end
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return '0'
"""


class RedisBuckets:
    """Buckets in Redis, shared by every API process; ``fallback`` counts while Redis is
    unreachable. One client per event loop (an asyncio connection belongs to its loop)."""

    kind = "redis"

    def __init__(self, url: str, fallback: MemoryBuckets, prefix: str = "dpsyn:limit") -> None:
        self.url = url
        self.fallback = fallback
        self.prefix = prefix
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Redis, AsyncScript]
        ] = weakref.WeakKeyDictionary()
        self._down_until = 0.0

    def _script(self) -> AsyncScript:
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            client = Redis.from_url(
                self.url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
            )
            found = self._clients[loop] = (client, client.register_script(_BUCKET_SCRIPT))
        return found[1]

    async def aclose(self) -> None:
        """Close this event loop's client (at the app's shutdown)."""
        found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found[0].aclose()

    async def _run(self, rule: Rule, subject: str, cost: int) -> float | None:
        """The script's answer, or None while Redis is down."""
        if time.monotonic() < self._down_until:
            return None
        try:
            answer = await self._script()(
                keys=[f"{self.prefix}:{rule.name}:{subject}"],
                args=[repr(rule.rate), rule.burst, cost],
            )
        except (TimeoutError, RedisError, OSError) as err:
            # The type only: a message may name the URL, and with it a password.
            log.warning(
                "rate limits: Redis unreachable (%s); counting in this process for %.0f s",
                type(err).__name__,
                REDIS_RETRY_S,
            )
            self._down_until = time.monotonic() + REDIS_RETRY_S
            return None
        return float(answer.decode() if isinstance(answer, bytes) else answer)

    async def take(self, rule: Rule, subject: str) -> float:
        wait = await self._run(rule, subject, 1)
        return await self.fallback.take(rule, subject) if wait is None else wait

    async def give_back(self, rule: Rule, subject: str) -> None:
        if await self._run(rule, subject, -1) is None:
            await self.fallback.give_back(rule, subject)

    def sizes(self) -> dict[str, int]:
        return self.fallback.sizes()  # Redis expires its own


def _rule(name: str, per_minute: int | None, setting: str, what: str, **kw: Any) -> Rule | None:
    if not per_minute:
        return None
    burst = kw.pop("burst", None) or per_minute
    return Rule(name, per_minute, burst, setting, what, **kw)


def redis_url_of(settings: Settings) -> str | None:
    """The Redis of the limits: their own setting, else the broker when it is a Redis."""
    if settings.limits_redis_url:
        return settings.limits_redis_url
    broker = settings.broker_url or ""
    return broker if broker.startswith(("redis://", "rediss://", "unix://")) else None


class Limiter:
    """The service's rate limits (module docstring), on one store of buckets."""

    def __init__(self, settings: Settings, buckets: Buckets | None = None) -> None:
        if buckets is None:
            url = redis_url_of(settings)
            buckets = RedisBuckets(url, MemoryBuckets()) if url else MemoryBuckets()
        self.buckets = buckets
        self.key = _rule(
            "key",
            settings.rate_limit_per_minute,
            "DPSYN_RATE_LIMIT_PER_MINUTE",
            "requests for this API key",
            burst=settings.rate_limit_burst,
        )
        self.model_calls = _rule(
            "model_calls",
            settings.ui_model_calls_per_minute,
            "DPSYN_UI_MODEL_CALLS_PER_MINUTE",
            "dashboard model calls for this API key",
        )
        self.auth_failures = _rule(
            "auth_failures",
            settings.auth_failures_per_minute,
            "DPSYN_AUTH_FAILURES_PER_MINUTE",
            "failed API-key checks from this address",
            per_address=True,
        )
        self.signin_failures = _rule(
            "signin_failures",
            settings.signin_failures_per_minute,
            "DPSYN_SIGNIN_FAILURES_PER_MINUTE",
            "failed sign-ins from this address",
            per_address=True,
        )

    @property
    def kind(self) -> str:
        return self.buckets.kind

    async def aclose(self) -> None:
        if isinstance(self.buckets, RedisBuckets):
            await self.buckets.aclose()

    def sizes(self) -> dict[str, int]:
        return self.buckets.sizes()

    async def attempt(self, rule: Rule | None, address: str) -> None:
        """Count an attempt of ``address`` against its failure limit, or refuse it; call
        before looking its key up, and :meth:`succeeded` if the key checks out. Counting
        every attempt first (rather than looking whether the address is over its limit and
        counting failures afterwards) bounds lookups even for attempts sent all at once."""
        await self.charge(rule, address)

    async def succeeded(self, rule: Rule | None, address: str) -> None:
        """The attempt of ``address`` authenticated: it does not count as a failure."""
        if rule is not None:
            await self.buckets.give_back(rule, address)

    async def charge(self, rule: Rule | None, key_id: str) -> None:
        """Spend one of the authenticated key's tokens, or refuse the request."""
        if rule is not None:
            wait = await self.buckets.take(rule, key_id)
            if wait > 0:
                raise RateLimitedError(rule, wait)


def client_address(scope: Scope) -> str:
    """Who failed, for the failure limits: the client's IP address (behind a trusted proxy
    uvicorn has put the forwarded one there), an IPv6 client by its /64 network (one host
    commonly holds a whole /64)."""
    client = scope.get("client")
    host = str(client[0]) if client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:64] or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


async def _rate_limited(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RateLimitedError)
    return exc.response()


def install_limits(app: FastAPI, settings: Settings) -> None:
    """The rate limiter (``app.state.limiter``), which the key checks of the API
    (:mod:`app.api.deps`) and the dashboard call; the limiter's Redis connections close when
    the app shuts down."""
    limiter = app.state.limiter = Limiter(settings)
    app.add_exception_handler(RateLimitedError, _rate_limited)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(target: Any) -> AsyncIterator[Any]:
        try:
            async with inner(target) as state:
                yield state
        finally:
            await limiter.aclose()

    app.router.lifespan_context = lifespan
