"""A deterministic backend with no model: for the test suite and the workers' test hook.

Word-level tokenizer over a growing vocabulary. Every teacher "predicts" the word ``w{i}`` for
the i-th token after the prompt's last text-field marker, and a newline once ``stop_after``
words were generated, so the consensus (and the stopping point) is known in advance. Every
call is recorded for inspection. :class:`SlowBackend` sleeps before each model call, so that a
job runs long enough for a fault test to kill its worker or stop its database mid-job.

It lives in ``app`` (not ``tests``) because ``workers.celery_app``'s test hook
(``DPSYN_TEST_FAKE_BACKEND``, refused in production) builds it in a worker process, and no
production module imports ``tests``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import numpy as np

EOS, NEWLINE = 0, 1
_WORDS = re.compile(r"\n|[^\s]+")

#: The vocabulary every backend starts from: the two specials and the words ``w0``..``w199``
#: it answers. Built once and copied per backend (the method contract builds one per run,
#: tens of thousands a test), in the order the ids were always assigned in.
_START_VOCAB: dict[str, int] = {"<eos>": EOS, "\n": NEWLINE} | {f"w{i}": 2 + i for i in range(200)}


class FakeBackend:
    name = "fake"
    eos_id = EOS

    def __init__(self, stop_after: int | None = 3, marker: str = "Question:") -> None:
        self.stop_after = stop_after
        self.marker = marker
        self.vocab: dict[str, int] = dict(_START_VOCAB)
        self.calls: list[tuple[str, list[list[int]]]] = []

    @property
    def newline_ids(self) -> frozenset[int]:
        return frozenset({NEWLINE})

    def _id(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab))

    def tokenize(self, text: str) -> list[int]:
        vocab = self.vocab  # _id inlined: the contract's audits tokenize millions of words
        return [vocab.setdefault(w, len(vocab)) for w in _WORDS.findall(text)]

    def detokenize(self, ids: Sequence[int]) -> str:
        words = {v: k for k, v in self.vocab.items()}
        return " ".join(words[i] for i in ids if i != EOS)

    def words(self, ids: Sequence[int]) -> list[str]:
        words = {v: k for k, v in self.vocab.items()}
        return [words[i] for i in ids]

    def _wanted(self, prompt: Sequence[int]) -> int:
        marker = self.vocab[self.marker]
        generated = len(prompt) - 1 - max(i for i, t in enumerate(prompt) if t == marker)
        if self.stop_after is not None and generated >= self.stop_after:
            return NEWLINE
        return self.vocab[f"w{generated}"]

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        self.calls.append(("top_k", [list(p) for p in prompts]))
        return np.array([[self.vocab[f"w{i}"] for i in range(k)] for _ in prompts])

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        self.calls.append(("probs", [list(p) for p in prompts]))
        out = np.full(token_sets.shape, 0.01)
        for row, prompt in enumerate(prompts):
            hit = np.flatnonzero(token_sets[row] == self._wanted(prompt))
            out[row, hit] = 1.0
        return out / out.sum(axis=1, keepdims=True)


class SlowBackend(FakeBackend):
    """The fake backend, ``delay_s`` seconds slower per model call."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        time.sleep(self.delay_s)
        return super().top_k(prompts, k)

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        time.sleep(self.delay_s)
        return super().next_token_probs(prompts, token_sets)
