"""A backend wrapper that remembers next-token answers (evaluation only).

PromptPATE's teachers give the same votes at every epsilon for one seed (same partition, same
public inputs); only the noise differs. Remembering each (prompt, token set) answer lets the
evaluation grid pay for the teachers' forward passes once per seed instead of once per
setting. The answers are those of the wrapped backend, so results do not change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from app.llm.base import LLMBackend, SameTokenizer, kv_scope


class MemoBackend(SameTokenizer):
    """:class:`LLMBackend` that answers repeated ``next_token_probs`` rows from memory."""

    def __init__(self, backend: LLMBackend, max_entries: int = 200_000) -> None:
        self._backend = backend
        self._memo: dict[tuple[tuple[int, ...], tuple[int, ...]], np.ndarray] = {}
        self.max_entries = max_entries
        self.hits = 0

    @contextmanager
    def kv_scope(self) -> Iterator[LLMBackend]:
        """A token-loop job's KV scope on the wrapped backend (``app.llm.base.kv_scope``):
        without it the job would run without incremental decoding. Answers are still
        remembered here; the evaluation runs one job at a time."""
        with kv_scope(self._backend) as scoped:
            outer, self._backend = self._backend, scoped
            try:
                yield self
            finally:
                self._backend = outer

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        return self._backend.top_k(prompts, k)

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        sets = np.asarray(token_sets)
        keys = [(tuple(p), tuple(int(t) for t in s)) for p, s in zip(prompts, sets, strict=True)]
        missing = [i for i, key in enumerate(keys) if key not in self._memo]
        if missing:
            fresh = self._backend.next_token_probs([prompts[i] for i in missing], sets[missing])
            if len(self._memo) + len(missing) > self.max_entries:
                self._memo.clear()
            for row, i in enumerate(missing):
                self._memo[keys[i]] = fresh[row]
        self.hits += len(keys) - len(missing)
        return np.stack([self._memo[key] for key in keys])
