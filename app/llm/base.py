"""The one interface the synthesis methods use to talk to a language model.

A backend answers one question in bulk: for each prompt of a batch (token ids), what is the
probability of each token of a small set, renormalised over that set? Everything the methods
need is here; they never see transformers, HTTP or a GPU. Implementations:
``app.llm.transformers_backend`` (local, CPU or GPU) and ``app.llm.vllm_http`` (a vLLM server).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, runtime_checkable

import numpy as np


class BackendError(RuntimeError):
    """The backend could not answer; the message says which backend or server, and why.

    A plain ``BackendError`` is final (a request the server rejects, HTTP 4xx, an empty
    batch): asking again would fail the same way, so it is never retried.

    ``status`` is the model server's HTTP status when it answered one. A job's stored error,
    the API and the worker log describe a backend failure by its type and ``status`` only
    (``workers.runner``), never by the message: a backend may put a prompt in it.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientBackendError(BackendError):
    """The backend could not answer *this time*: a timeout, a refused or dropped connection,
    HTTP 429 or 5xx. Only this is retried, and only by :mod:`app.llm.retry` (backends never
    retry themselves, so one call is never retried at two levels)."""


@runtime_checkable
class LLMBackend(Protocol):
    """Batched next-token distributions over caller-chosen token sets."""

    @property
    def name(self) -> str:
        """Model identifier, recorded with every result."""
        ...

    @property
    def eos_id(self) -> int:
        """End-of-sequence token id."""
        ...

    @property
    def newline_ids(self) -> frozenset[int]:
        """Ids of tokens that end a line (a demonstration stops at any of them)."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens."""
        ...

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens dropped)."""
        ...

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        """For prompt b, the next-token probabilities of ``token_sets[b]``, renormalised.

        ``prompts`` holds B token-id sequences (BOS is added by the backend when the model
        needs one); ``token_sets`` is a B x K integer array. Returns a B x K float array whose
        rows sum to 1. All prompts go to the model together.
        """
        ...

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        """The ``k`` most probable next-token ids of each prompt (B x k, most probable first)."""
        ...


class SameTokenizer:
    """Mixin of a backend around another one (its ``_backend``) that keeps the wrapped one's
    model name, end and newline tokens and tokenizer: written once here, so that a wrapper
    (evaluation memo, KV scope) states only what it changes."""

    _backend: LLMBackend

    @property
    def name(self) -> str:
        return self._backend.name

    @property
    def eos_id(self) -> int:
        return self._backend.eos_id

    @property
    def newline_ids(self) -> frozenset[int]:
        return self._backend.newline_ids

    def tokenize(self, text: str) -> list[int]:
        return self._backend.tokenize(text)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._backend.detokenize(ids)


@runtime_checkable
class KVScoped(Protocol):
    """A backend that can keep prompts' KV caches for the length of one job (incremental
    decoding: ``app.llm.transformers_backend``). Optional: ``kv_scope`` below falls back to
    the backend itself when it has none.

    ``kv_scope()`` returns a context manager yielding a backend whose calls may reuse the
    caches of that scope's earlier calls, and of no other scope's; the caches are freed when
    the block ends, however it ends. A wrapper (``app.llm.retry.RetryingBackend``) must pass
    the scope through to what it wraps and wrap the scoped backend in turn.
    """

    def kv_scope(self) -> AbstractContextManager[LLMBackend]: ...


# Each job's KV store, in MiB. Sized for the packaged CPU model: Gemma-3-270M keeps 36 kB of
# keys and values per token in float32 (18 layers x 1 KV head x 256 x 2 x 4 bytes), 18 kB in
# bfloat16, so 512 MiB hold 14,500 float32 tokens: one token step of the largest paper shape
# (AG News, 4 shots x M 10 teacher prompts of about 150 tokens, 6,000 tokens) with room for
# the public prompts and the shared instruction that the next step extends.
DEFAULT_KV_CACHE_MB = 512.0


@contextmanager
def kv_scope(backend: LLMBackend) -> Iterator[LLMBackend]:
    """``backend``'s scope for one job (``KVScoped``), or ``backend`` itself if it keeps no
    caches across calls (vLLM, the fake backend)."""
    if isinstance(backend, KVScoped):
        with backend.kv_scope() as scoped:
            yield scoped
    else:
        yield backend
