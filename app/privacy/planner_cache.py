"""AdaDPSyn planner choices remembered by every process.

Why. The planner (:func:`app.privacy.planner.choose`) simulates synthetic teachers for each
public shape (M, K, the grid bucket of Tang's multiplier): 2.8 s at M 10 / K 50 and 8.7 s at
M 20 / K 100 on two cores, the largest part of a cold quote. Its answer is a deterministic
function of those three numbers and the planner's own constants, so it is remembered: in the
process (an LRU) and, where the service installs one with :func:`planner_store`, in a shared
store (the database, :mod:`app.services.calibrations`), so that a shape planned once by any
API process or replica is a lookup for all of them, after restarts too.

Since the planner reads every shape off its table from the table's nearest shape
(:func:`app.privacy.planner.nearest_choice`), the simulation, and so this store, serve only a
process whose table is missing or stale (computed by another planner).

The key hashes the shape and everything the simulation reads (:func:`choice_key`); bump
:data:`PLANNER_CACHE_VERSION` whenever the simulation changes what it computes in a way the
constants hashed do not show. This module does no I/O itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

PLANNER_CACHE_VERSION = 1


class PlannerStore(Protocol):
    """A shared store of planner choices (JSON objects) by key; failures are its own."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: Mapping[str, Any]) -> None: ...


_STORE: contextvars.ContextVar[PlannerStore | None] = contextvars.ContextVar(
    "planner_store", default=None
)


@contextlib.contextmanager
def planner_store(store: PlannerStore | None) -> Iterator[None]:
    """Planner choices inside the block also look in, and write to, ``store``."""
    token = _STORE.set(store)
    try:
        yield
    finally:
        _STORE.reset(token)


def current_store() -> PlannerStore | None:
    return _STORE.get()


def choice_key(shape: Mapping[str, Any], constants: Mapping[str, Any]) -> str:
    """The SHA-256 hex digest of a shape and the planner constants its choice depends on."""
    document = {"version": PLANNER_CACHE_VERSION, "shape": shape, "constants": constants}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()
