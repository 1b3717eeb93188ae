"""The one retry layer over a model backend: only :class:`TransientBackendError` is retried.

Why here and only here: a vLLM call used to be retried by the HTTP client (4 times) and then
again by the job runner (3 more, around each of those), and the runner retried every
``BackendError``, HTTP 400 and "empty batch" included, which can only fail again. Backends
now report each failure once, as final (:class:`~app.llm.base.BackendError`) or transient
(:class:`~app.llm.base.TransientBackendError`), and whoever uses a backend wraps it in one
:class:`RetryingBackend`: the job runner for jobs, ``/complete`` for answers.

A backend call is deterministic in its inputs, so retrying it does not change what a
mechanism releases. Log lines name the call and the error type, never prompts or text.

A job's KV scope (:func:`app.llm.base.kv_scope`, incremental decoding) passes through:
``RetryingBackend.kv_scope`` opens the wrapped backend's scope and wraps the scoped backend
with the same policy and lock. A scoped call that raises empties its scope's store, so a retry
recomputes from scratch rather than extending caches a failed call may have half written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from app.llm.base import LLMBackend, TransientBackendError, kv_scope

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more attempts after a transient failure, waiting base, 2x base, 4x base..."""

    retries: int = 3
    base_delay_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep

    def call(self, fn: Callable[[], T], *, what: str, context: str = "backend") -> T:
        """``fn()``, retried on :class:`TransientBackendError` only; any other error, or the
        last transient one, propagates unchanged."""
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except TransientBackendError as err:
                if attempt == self.retries:
                    raise
                delay = self.base_delay_s * 2**attempt
                log.warning(
                    "%s: %s failed (%s), retry %d of %d in %.1f s",
                    context,
                    what,
                    type(err).__name__,
                    attempt + 1,
                    self.retries,
                    delay,
                )
                self.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")


class RetryingBackend:
    """An :class:`LLMBackend` whose calls are retried by ``retry`` and, when a ``lock`` is
    given, serialised on it (a local model's forward passes are not re-entrant: the
    provider's :class:`~app.llm.fair_lock.FairLock`, or one user's share of it). The lock is
    held for one attempt, never while waiting to retry."""

    def __init__(
        self,
        backend: LLMBackend,
        *,
        retry: RetryPolicy,
        lock: AbstractContextManager[object] | None = None,
        context: str = "backend",
    ) -> None:
        self._backend, self._retry, self._lock, self._context = backend, retry, lock, context
        self._newline_ids: frozenset[int] | None = None

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        def attempt() -> T:
            with self._lock if self._lock is not None else nullcontext():
                return fn()

        return self._retry.call(attempt, what=what, context=self._context)

    @contextmanager
    def kv_scope(self) -> Iterator[LLMBackend]:
        """The wrapped backend's job scope, behind the same retries and lock (itself when
        the wrapped backend keeps no caches)."""
        with kv_scope(self._backend) as scoped:
            if scoped is self._backend:
                yield self
                return
            wrapped = RetryingBackend(
                scoped, retry=self._retry, lock=self._lock, context=self._context
            )
            wrapped._newline_ids = self._newline_ids
            yield wrapped

    @property
    def name(self) -> str:
        return self._backend.name

    @property
    def eos_id(self) -> int:
        return self._call("eos_id", lambda: self._backend.eos_id)

    @property
    def newline_ids(self) -> frozenset[int]:
        if self._newline_ids is None:
            self._newline_ids = self._call("newline_ids", lambda: self._backend.newline_ids)
        return self._newline_ids

    def tokenize(self, text: str) -> list[int]:
        return self._call("tokenize", lambda: self._backend.tokenize(text))

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._call("detokenize", lambda: self._backend.detokenize(ids))

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        return self._call(
            "next_token_probs", lambda: self._backend.next_token_probs(prompts, token_sets)
        )

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        return self._call("top_k", lambda: self._backend.top_k(prompts, k))
