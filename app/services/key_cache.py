"""In-process caches for the prompt-read hot path: API-key lookups and prompt bodies.

**Key lookups.** Every API request authenticated against the database: a thread hop and a
query, most of a prompt read's cost. :class:`KeyCache` remembers a *successful* lookup (the
key's hash -> its tenant, ID and scope) for at most :data:`KEY_TTL_S` seconds; failures are
never cached, so a wrong key always costs a lookup (and counts against the address's
failed-check limit as before). Staleness after revocation is bounded:

* revoking a key or disabling a tenant *in this process* (the API's ``DELETE /v1/keys/{id}``,
  ``dpsyn admin`` run in-process) calls :func:`forget_key` / :func:`forget_tenant`, which drop
  the entries of every cache of the process at once, and bump a generation so that a lookup
  that began before the revocation cannot store its (now stale) answer afterwards;
* revoking from *another* process (``dpsyn admin`` against the shared database, another API
  replica) is seen within :data:`KEY_TTL_S` seconds, when the entry expires. An entry is
  never served past that age; one past half of it is looked up again in the background
  while it is still served (a lookup that finds the key revoked drops it), and concurrent
  misses of one key share one lookup. Before that, every entry of a busy key expired under
  all the requests in flight at once, which all went to the database together: at 80
  clients that made p99 206 ms instead of 46 (bench/load.py).

**Prompt bodies.** A prompt set never changes once stored, so :class:`LruCache` also holds
the serialised body of ``GET /v1/prompts/{id}`` per (tenant, prompt ID) with its ETag. The
tenant is part of the key, and only a successful read fills it: another tenant asking for the
same ID misses and gets the database's 404.

Both are bounded LRUs (oldest use evicted first) guarded by a lock: the event loop reads
them, request threads may revoke.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.db.models import KeyScope

#: Longest time a key revoked (or a tenant disabled) by another process still opens the API.
KEY_TTL_S = 5.0
#: Most keys remembered per process.
KEY_CACHE_SIZE = 10_000
#: Least time between two writes of one key's ``last_used_at``.
LAST_USED_INTERVAL_S = 60.0

#: The clock entries expire by (a module attribute, so that tests can move it on).
clock = time.monotonic

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A bounded, thread-safe LRU map; entries may expire after ``ttl_s`` (None: never).

    Bounded by ``max_entries`` and, where ``weigh`` is given, by ``max_weight`` in all (the
    prompt bodies: bytes): the least recently used entries go first."""

    def __init__(
        self,
        max_entries: int,
        ttl_s: float | None = None,
        *,
        weigh: Callable[[V], int] | None = None,
        max_weight: int | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._weigh, self.max_weight = weigh, max_weight
        self.weight = 0

    def get(self, key: K) -> V | None:
        found = self.get_with_expiry(key)
        return None if found is None else found[0]

    def get_with_expiry(self, key: K) -> tuple[V, float] | None:
        """The value and the clock time it expires at (inf: never), if live."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            value, expires = entry
            if self.ttl_s is not None and clock() >= expires:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return value, (expires if self.ttl_s is not None else float("inf"))

    def discard(self, key: K) -> None:
        with self._lock:
            if key in self._entries:
                self._drop(key)

    def put(self, key: K, value: V) -> None:
        expires = clock() + (self.ttl_s or 0.0)
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (value, expires)
            self.weight += self._weight_of(value)
            while len(self._entries) > self.max_entries or (
                self.max_weight is not None and self.weight > self.max_weight
            ):
                self._drop(next(iter(self._entries)))

    def _weight_of(self, value: V) -> int:
        return self._weigh(value) if self._weigh is not None else 0

    def _drop(self, key: K) -> None:
        """Remove ``key`` (present) and its weight; the caller holds the lock."""
        value, _ = self._entries.pop(key)
        self.weight -= self._weight_of(value)

    def discard_where(self, predicate: Callable[[V], bool]) -> None:
        """Drop every entry whose value satisfies ``predicate``."""
        with self._lock:
            for key in [k for k, (v, _) in self._entries.items() if predicate(v)]:
                self._drop(key)

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[K]:
        """The keys held now, least recently used first."""
        with self._lock:
            return list(self._entries)


@dataclass(frozen=True)
class CachedKey:
    """What authentication needs from a key row, detached from any session."""

    tenant_id: str
    key_id: str
    scope: KeyScope


class LastUsedThrottle:
    """When each key's ``last_used_at`` was last written by this process, so that it is
    written at most once per ``interval_s`` per key.

    Authentication records that a key was used, but a write per request would turn every
    prompt read -- served from the cache without any query -- into a database write, and on
    SQLite into a wait for the write lock. So a use is written only when ``interval_s`` has
    passed since this process last wrote that key's time. The marks are kept apart from the
    cached lookups, which expire after ``KEY_TTL_S`` (5 s): a mark lives as long as the key
    is used (an LRU, bounded like the lookups), so a key renewed in the cache every few
    seconds still writes once a minute, not once per renewal. Other processes (API replicas)
    each write at most once a minute too, and the write itself is conditional on the stored
    time being older than the interval (:func:`app.services.tenants.touch_last_used`)."""

    def __init__(
        self, max_entries: int = KEY_CACHE_SIZE, interval_s: float = LAST_USED_INTERVAL_S
    ) -> None:
        self.interval_s = interval_s
        self._written: LruCache[str, float] = LruCache(max_entries)
        self._lock = threading.Lock()

    def due(self, key_id: str) -> bool:
        """Whether this use of ``key_id`` should be written; if so, it is marked as written
        now (one caller wins: concurrent uses of the key write once)."""
        with self._lock:
            last = self._written.get(key_id)
            at = clock()
            if last is not None and at - last < self.interval_s:
                return False
            self._written.put(key_id, at)
            return True


class KeyCache:
    """Successful key lookups by key hash, for at most ``ttl_s`` seconds (module docstring),
    and the last-used throttle of the keys (:class:`LastUsedThrottle`)."""

    def __init__(self, max_entries: int = KEY_CACHE_SIZE, ttl_s: float = KEY_TTL_S) -> None:
        self._entries: LruCache[str, CachedKey] = LruCache(max_entries, ttl_s)
        self.last_used = LastUsedThrottle(max_entries)
        _CACHES.add(self)

    def get(self, key_hash: str) -> CachedKey | None:
        return self._entries.get(key_hash)

    def get_fresh(self, key_hash: str) -> tuple[CachedKey | None, bool]:
        """The remembered key, and whether it is in the second half of its life: then the
        caller looks it up again in the background (:func:`app.api.deps._lookup`), so that
        under steady traffic an entry is renewed before it expires and no request waits for
        the database, and no crowd of requests misses at once when it expires."""
        found = self._entries.get_with_expiry(key_hash)
        if found is None:
            return None, False
        key, expires = found
        return key, expires - clock() < self.ttl_s / 2

    @property
    def ttl_s(self) -> float:
        return self._entries.ttl_s or 0.0

    def discard(self, key_hash: str) -> None:
        """The database says the key no longer opens the API (revoked elsewhere)."""
        self._entries.discard(key_hash)

    def put(self, key_hash: str, key: CachedKey, generation: int) -> None:
        """Remember ``key`` unless a revocation happened since ``generation`` was read
        (:func:`generation`, before the lookup): its answer may predate the revocation."""
        with _GENERATION_LOCK:
            if generation == _generation[0]:
                self._entries.put(key_hash, key)

    def forget(self, predicate: Callable[[CachedKey], bool]) -> None:
        self._entries.discard_where(predicate)

    def hashes(self) -> list[str]:
        """The hashes remembered now (live or not yet dropped), most recently used last."""
        return self._entries.keys()

    def renew(self, live: dict[str, CachedKey], asked: list[str], generation: int) -> None:
        """Apply a bulk lookup of ``asked`` (:func:`app.services.tenants.live_keys_by_hash`,
        made after ``generation`` was read): each key still live is remembered afresh, each
        other one dropped; a key in ``live`` that was not asked for (the start-up load) is
        remembered too. Nothing is renewed if a revocation happened since ``generation``:
        the lookup may predate it (the keys then expire or are renewed next time)."""
        with _GENERATION_LOCK:
            if generation != _generation[0]:
                return
            for key_hash in asked:
                if key_hash not in live:
                    self._entries.discard(key_hash)
            for key_hash, key in live.items():
                self._entries.put(key_hash, key)

    def __len__(self) -> int:
        return len(self._entries)


_CACHES: weakref.WeakSet[KeyCache] = weakref.WeakSet()
_GENERATION_LOCK = threading.Lock()
_generation = [0]


def generation() -> int:
    """Read before a lookup; pass to :meth:`KeyCache.put`."""
    return _generation[0]


def _invalidate(predicate: Callable[[CachedKey], bool]) -> None:
    with _GENERATION_LOCK:
        _generation[0] += 1
        for cache in list(_CACHES):
            cache.forget(predicate)


def forget_key(key_id: str) -> None:
    """A key was revoked here: no cache of this process opens the API with it any more."""
    _invalidate(lambda key: key.key_id == key_id)


def forget_tenant(tenant_id: str) -> None:
    """A tenant was disabled here: none of its keys is served from a cache any more."""
    _invalidate(lambda key: key.tenant_id == tenant_id)
