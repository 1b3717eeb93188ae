"""Engine time on the routes that run the model, shared between keys and tenants.

The OpenAI-compatible routes (``/v1/chat/completions``, ``/v1/completions``) and the model
calls (``/v1/prompts/{id}/complete`` and the dashboard's) run the model while the request
waits. Before, nothing bounded one key's share: on the embedded engine one key's
8,000-character message held the model for 35 s and another app's short chat waited 32 s.
Two parts share it now: the engine hands each forward pass to the user that has had it least
(:mod:`app.llm.fair_lock`), and this gate bounds what one key and one tenant may ask:

* **answers at once**: at most ``per_key`` of one key's, ``per_tenant`` of one tenant's and
  ``engine`` in all (0: no bound) run at once; a request past them waits, first come first
  served among those that fit, at most ``wait_s``, then gets **429** ``engine_busy`` with
  ``Retry-After`` naming the bound and its setting;
* **prompt tokens a minute**: each key may have the engine read ``prompt_tokens_per_minute``
  prompt tokens a minute (the app's text and the DP prompt, as counted in ``usage``). A key
  is charged what an answer read once it is done, so one long request is never refused for
  its length alone; while a key owes tokens, its next request gets **429**
  ``prompt_tokens_rate`` with ``Retry-After`` the seconds until it owes none.

The defaults are sized per engine (:class:`EngineLimits`): the embedded CPU engine reads about
700 prompt tokens a second on 2 cores (bench/engine_share.py), so a key's 20,000 a minute is
about half of it; vLLM batches many answers itself, so its bounds only keep one key from
filling a server. The counts are kept in this API process (the embedded engine lives in one).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated

import anyio.from_thread
from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import AnyKey
from app.llm.factory import BackendKind
from app.services.errors import TooManyError
from app.settings import Settings

ENGINE_BUSY = "engine_busy"
PROMPT_TOKENS_RATE = "prompt_tokens_rate"


class EngineLimits(BaseModel):
    """What one key and one tenant may ask of the engine (module docstring); 0: no bound."""

    model_config = ConfigDict(frozen=True)

    per_key: int = Field(ge=0)
    per_tenant: int = Field(ge=0)
    engine: int = Field(ge=0)
    wait_s: float = Field(ge=0)
    prompt_tokens_per_minute: int = Field(ge=0)

    @classmethod
    def of(cls, settings: Settings) -> EngineLimits:
        """The settings' limits, each unset one the engine's default."""
        defaults = ENGINE_DEFAULTS[settings.backend]
        chosen = {
            "per_key": settings.generations_per_key,
            "per_tenant": settings.generations_per_tenant,
            "engine": settings.engine_generations,
            "prompt_tokens_per_minute": settings.prompt_tokens_per_minute,
        }
        values = {name: defaults[name] if v is None else v for name, v in chosen.items()}
        return cls(**values, wait_s=settings.generation_wait_s)


#: Measured on the embedded engine (2 CPU cores): more answers at once only slow each, and a
#: key's prompt tokens a minute are about half of what the engine reads in one.
ENGINE_DEFAULTS: dict[BackendKind, dict[str, int]] = {
    BackendKind.TRANSFORMERS: {
        "per_key": 2,
        "per_tenant": 3,
        "engine": 4,
        "prompt_tokens_per_minute": 20_000,
    },
    BackendKind.VLLM: {
        "per_key": 32,
        "per_tenant": 128,
        "engine": 0,
        "prompt_tokens_per_minute": 0,
    },
}


@dataclass
class Slot:
    """One request's place on the engine: taken by :meth:`enter` (once the request is known
    to be valid), given back when the request's dependency ends; the route notes the prompt
    tokens its answer read."""

    gate: EngineGate = field(repr=False)
    key_id: str
    tenant_id: str
    prompt_tokens: int = 0
    entered: bool = False

    def enter(self) -> None:
        """Take the place from a route's thread: 429 past the key's token rate, else wait for
        the bounds at most ``wait_s`` (on the event loop; this thread blocks)."""
        anyio.from_thread.run(self.gate.enter, self)


@dataclass
class _Waiter:
    key_id: str
    tenant_id: str
    granted: asyncio.Future[None] = field(repr=False)


class EngineGate:
    """The bounds of :class:`EngineLimits` for one API process. Touched from the event
    loop only (the dependencies below run there)."""

    def __init__(self, limits: EngineLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        self.running = 0
        self.by_key: Counter[str] = Counter()
        self.by_tenant: Counter[str] = Counter()
        self.waiters: list[_Waiter] = []
        self.balances: dict[str, tuple[float, float]] = {}  # key: (tokens left, when)

    @asynccontextmanager
    async def hold(self, key_id: str, tenant_id: str) -> AsyncIterator[Slot]:
        """A place on the engine for one answer, given back (and its prompt tokens charged)
        when the block ends: for a streamed answer, once the stream has been sent. ``enter``
        it before the model runs."""
        slot = Slot(self, key_id, tenant_id)
        try:
            yield slot
        finally:
            if slot.entered:
                self._leave(slot)

    async def enter(self, slot: Slot) -> None:
        """Admit ``slot`` (see :class:`Slot`); raises the 429s."""
        self._check_rate(slot.key_id)
        await self._enter(slot.key_id, slot.tenant_id)
        slot.entered = True

    def _fits(self, key_id: str, tenant_id: str) -> bool:
        limits = self.limits
        return (
            (not limits.engine or self.running < limits.engine)
            and (not limits.per_key or self.by_key[key_id] < limits.per_key)
            and (not limits.per_tenant or self.by_tenant[tenant_id] < limits.per_tenant)
        )

    def _take(self, key_id: str, tenant_id: str) -> None:
        self.running += 1
        self.by_key[key_id] += 1
        self.by_tenant[tenant_id] += 1

    async def _enter(self, key_id: str, tenant_id: str) -> None:
        # Every waiter that fits is started as a place is given back (``_leave``), so those
        # still waiting do not fit: a newcomer that fits takes no place of theirs.
        if self._fits(key_id, tenant_id):
            self._take(key_id, tenant_id)
            return
        waiter = _Waiter(key_id, tenant_id, asyncio.get_running_loop().create_future())
        self.waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.granted), self.limits.wait_s)
        except TimeoutError:
            if waiter.granted.done():  # granted as the wait ran out: keep it
                return
            self.waiters.remove(waiter)
            raise self._busy(key_id, tenant_id) from None

    def _leave(self, slot: Slot) -> None:
        self.running -= 1
        self._drop(self.by_key, slot.key_id)
        self._drop(self.by_tenant, slot.tenant_id)
        self._charge(slot.key_id, slot.prompt_tokens)
        for waiter in list(self.waiters):
            if self._fits(waiter.key_id, waiter.tenant_id):
                self.waiters.remove(waiter)
                self._take(waiter.key_id, waiter.tenant_id)
                waiter.granted.set_result(None)

    @staticmethod
    def _drop(counts: Counter[str], name: str) -> None:
        counts[name] -= 1
        if counts[name] <= 0:
            del counts[name]

    def _busy(self, key_id: str, tenant_id: str) -> TooManyError:
        """The 429 of a request that could not start within its wait, naming the bound."""
        limits = self.limits
        what, setting, bound = "answers on the engine", "DPSYN_ENGINE_GENERATIONS", limits.engine
        if limits.per_key and self.by_key[key_id] >= limits.per_key:
            what, setting, bound = (
                "of this key's answers",
                "DPSYN_GENERATIONS_PER_KEY",
                limits.per_key,
            )
        elif limits.per_tenant and self.by_tenant[tenant_id] >= limits.per_tenant:
            what, setting = "of this tenant's answers", "DPSYN_GENERATIONS_PER_TENANT"
            bound = limits.per_tenant
        return TooManyError(
            f"the model is busy: at most {bound} {what} at once ({setting}), and none ended "
            f"within {limits.wait_s:g} s (DPSYN_GENERATION_WAIT_S); retry after 1 s",
            code=ENGINE_BUSY,
            retry_after_s=1,
            limit=setting,
        )

    def balance(self, key_id: str) -> float:
        """The key's prompt tokens left this minute (negative: owed), refilled at the
        per-minute rate up to one minute's allowance."""
        per_minute = self.limits.prompt_tokens_per_minute
        left, at = self.balances.get(key_id, (float(per_minute), 0.0))
        return min(float(per_minute), left + (self.clock() - at) * per_minute / 60.0)

    def _charge(self, key_id: str, tokens: int) -> None:
        """Take ``tokens`` read from the key's allowance (it may go below zero)."""
        if not self.limits.prompt_tokens_per_minute or tokens <= 0:
            return
        self.balances[key_id] = (self.balance(key_id) - tokens, self.clock())

    def _check_rate(self, key_id: str) -> None:
        """429 while the key owes prompt tokens, with the seconds until it owes none."""
        per_minute = self.limits.prompt_tokens_per_minute
        if not per_minute or key_id not in self.balances:
            return
        left = self.balance(key_id)
        if left >= per_minute:
            del self.balances[key_id]  # a full allowance again: forget the key
        if left >= 0:
            return
        retry = max(1, math.ceil(-left / (per_minute / 60.0)))
        raise TooManyError(
            f"this key's answers read more than {per_minute} prompt tokens a minute "
            f"(DPSYN_PROMPT_TOKENS_PER_MINUTE); retry in {retry} s",
            code=PROMPT_TOKENS_RATE,
            retry_after_s=retry,
            limit="DPSYN_PROMPT_TOKENS_PER_MINUTE",
        )


def engine_gate(request: Request) -> EngineGate:
    """The app's gate (``app.main`` makes it from the settings)."""
    gate: EngineGate = request.app.state.engine_gate
    return gate


async def engine_slot(request: Request, principal: AnyKey) -> AsyncIterator[Slot]:
    """A dependency: the caller's place on the engine, which the route enters once the
    request is valid, held until its answer has been sent."""
    async with engine_gate(request).hold(principal.key_id, principal.tenant_id) as slot:
        yield slot


EngineSlot = Annotated[Slot, Depends(engine_slot)]
