"""The local engine's lock, handed to the user that has had the least engine time.

A local model runs one forward pass at a time (its passes are not re-entrant), so every
caller takes the provider's lock around each call (:class:`app.llm.retry.RetryingBackend`).
With a plain ``threading.Lock`` whoever asked next after a release was arbitrary: a long
answer's next step usually won, and a short answer beside it waited for most of it (32 s
behind one 8,000-character request on the packaged model).

:class:`FairLock` hands the engine, at each release, to the waiting user that has held it
least so far (least attained service, ties first come first served). A user is a
:class:`Share`: one answer, one validation, or the :attr:`FairLock.background` share of
every job and advice run in the process. A request that just arrived has held the engine
for nothing, so its calls go first, and it waits at most one call of a longer user per call
(a piece of a long prompt, :data:`app.llm.generation.PREFILL_CHUNK` tokens, or one answer
token) before its calls run one after another: at a release, the least-served user keeps the
engine for :data:`KEEP_S` so that its next call, a few Python steps later, is not overtaken.
A long answer goes on whenever nobody newer waits. Jobs share one account whose time
only grows, so they yield to answers at every call and take the engine when it is free.
"""

from __future__ import annotations

import itertools
import threading
import time

#: How long the least-served user keeps the engine after a call for its next one: longer
#: than the Python between two calls of one answer, far shorter than a call (50 ms or more).
KEEP_S = 0.02


class Share:
    """One user of the engine: the seconds it has held it."""

    def __init__(self, lock: FairLock, name: str) -> None:
        self.lock, self.name = lock, name
        self.held_s = 0.0

    def __enter__(self) -> Share:
        self.lock.acquire(self)
        return self

    def __exit__(self, *raised: object) -> None:
        self.lock.release(self)


class FairLock:
    """A lock given, at each release, to the waiter whose share has held it least (module
    docstring). ``with lock:`` takes it for :attr:`background`; ``with lock.share(...)``
    for a user of its own. Not re-entrant."""

    def __init__(self) -> None:
        self._state = threading.Condition(threading.Lock())
        self._held = False
        self._since = 0.0
        self._tickets = itertools.count()
        self._waiting: list[tuple[Share, int]] = []
        self._kept: tuple[Share, float] | None = None  # who may take it first, until when
        self.background = Share(self, "background")

    def share(self, name: str) -> Share:
        """A new user of the engine, with no time held yet."""
        return Share(self, name)

    def acquire(self, share: Share) -> None:
        with self._state:
            entry = (share, next(self._tickets))
            self._waiting.append(entry)
            while (wait := self._wait_for(entry)) != 0:
                self._state.wait(timeout=wait)
            self._waiting.remove(entry)
            self._held, self._since = True, time.monotonic()
            self._kept = None

    def _wait_for(self, entry: tuple[Share, int]) -> float | None:
        """0 when ``entry`` may take the lock now; else the longest wait before asking again
        (None: until a release)."""
        if self._held:
            return None
        if self._kept is not None:
            share, until = self._kept
            if share is entry[0]:
                return 0
            left = until - time.monotonic()
            if left > 0:
                return left
        return 0 if self._first() is entry else None

    def release(self, share: Share) -> None:
        with self._state:
            share.held_s += time.monotonic() - self._since
            self._held = False
            # The user that has had the engine least keeps it for a moment: its next call
            # comes a few Python steps later, and without this a waiting longer user takes
            # the engine in that gap, once per call (a short answer then waited one long
            # call per call of its own instead of one in all).
            others = [waiter.held_s for waiter, _ in self._waiting if waiter is not share]
            keep = others and share.held_s < min(others)
            self._kept = (share, time.monotonic() + KEEP_S) if keep else None
            self._state.notify_all()

    def _first(self) -> tuple[Share, int]:
        return min(self._waiting, key=lambda entry: (entry[0].held_s, entry[1]))

    def waiting(self) -> int:
        """Calls waiting for the engine now."""
        with self._state:
            return len(self._waiting)

    def __enter__(self) -> FairLock:
        self.acquire(self.background)
        return self

    def __exit__(self, *raised: object) -> None:
        self.release(self.background)
