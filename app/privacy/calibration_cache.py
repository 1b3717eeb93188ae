"""Calibrations remembered by their public inputs, so that admission does not re-run the search.

Why. Calibrating the free noise multiplier is a bracketed search over the accountant (tens to
hundreds of milliseconds per evaluation), and most jobs share a handful of public shapes.
:func:`app.privacy.calibration.calibrate_noise` is a deterministic function of public inputs
only: the privacy model (aggregator parameters, accounting, M, N, tmax), the label partition
sizes, the shots per label, the target epsilon, delta, the search's tolerance and iteration
limit, the multiplier range and the accountant's code. :func:`calibration_key` hashes all of
them; the answer (the multiplier and its epsilon, two floats) is then remembered in a bounded
in-process LRU and, where the service installs one with :func:`calibration_store`, in a shared
store (the database, :mod:`app.services.calibrations`) so that every API process benefits.

The cached answer is the one the search would return: the privacy model is rebuilt from the
cached multiplier exactly as the search builds it. Bump :data:`CALIBRATION_VERSION` whenever
the search or an accountant changes what it computes; old keys then simply miss.

This module does no I/O itself: the shared store is any object with ``get``/``put``.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib.metadata
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

CALIBRATION_VERSION = 1
MEMORY_SIZE = 1024  # calibrations one process keeps (two floats and a 64-byte key each)


class CalibrationStore(Protocol):
    """A shared store of calibrations (multiplier, epsilon) by key; failures are its own."""

    def get(self, key: str) -> tuple[float, float] | None: ...

    def put(self, key: str, value: tuple[float, float]) -> None: ...


def _accounting_version() -> str:
    try:
        return importlib.metadata.version("dp-accounting")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a broken install
        return "unknown"


_LIBRARY_VERSION = _accounting_version()


def calibration_key(inputs: Mapping[str, Any]) -> str:
    """The SHA-256 hex digest of every input a calibration reads (public values only).

    ``inputs`` is JSON-serialisable; floats are written with ``repr`` precision, so two keys
    are equal only when every input is bit for bit the same. The search's version and the
    accounting library's version are part of the key."""
    document = {
        "version": CALIBRATION_VERSION,
        "dp_accounting": _LIBRARY_VERSION,
        **inputs,
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class MemoryCache:
    """A thread-safe bounded LRU of calibrations: API requests plan on worker threads."""

    def __init__(self, size: int = MEMORY_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[float, float] | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: tuple[float, float]) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


MEMORY = MemoryCache()
_STORE: contextvars.ContextVar[CalibrationStore | None] = contextvars.ContextVar(
    "calibration_store", default=None
)


@contextlib.contextmanager
def calibration_store(store: CalibrationStore | None) -> Iterator[None]:
    """Calibrations inside the block also look in, and write to, ``store`` (planning runs
    synchronously on one thread, so a context variable reaches it through any call path)."""
    token = _STORE.set(store)
    try:
        yield
    finally:
        _STORE.reset(token)


def lookup(key: str) -> tuple[float, float] | None:
    """The remembered calibration for ``key``: memory first, then the shared store (which
    then warms memory)."""
    value = MEMORY.get(key)
    if value is not None:
        return value
    store = _STORE.get()
    if store is None:
        return None
    value = store.get(key)
    if value is not None:
        MEMORY.put(key, value)
    return value


def remember(key: str, value: tuple[float, float]) -> None:
    """Keep a fresh calibration in memory and in the shared store, if one is installed."""
    MEMORY.put(key, value)
    store = _STORE.get()
    if store is not None:
        store.put(key, value)
