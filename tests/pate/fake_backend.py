"""A deterministic backend whose teachers answer predictably, so consensus is known.

Word-level tokenizer (like ``tests/synthesis/fake_backend.py``). For a classification prompt
ending ``... Review: {query} Sentiment:`` it puts most probability on:

* ``positive`` when the query contains the word ``good``, ``negative`` when it contains
  ``bad``: every teacher agrees (high consensus);
* otherwise the label of the prompt's first demonstration: a teacher votes its own private
  example's label, so on a balanced private set the vote splits (low consensus).

Every call is recorded (as text) for inspection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

EOS, NEWLINE = 0, 1


class PateFakeBackend:
    name = "fake-pate"
    eos_id = EOS

    def __init__(self, text_field: str = "Review:", label_field: str = "Sentiment:") -> None:
        self.text_field, self.label_field = text_field, label_field
        self.vocab: dict[str, int] = {"<eos>": EOS, "\n": NEWLINE}
        self.calls: list[list[str]] = []  # detokenised prompts of each next_token_probs call

    @property
    def newline_ids(self) -> frozenset[int]:
        return frozenset({NEWLINE})

    def _id(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab))

    def tokenize(self, text: str) -> list[int]:
        return [self._id(w) for w in re.findall(r"\n|[^\s]+", text)]

    def detokenize(self, ids: Sequence[int]) -> str:
        words = {v: k for k, v in self.vocab.items()}
        return " ".join(words[i] for i in ids if i != EOS)

    def answer(self, words: list[str]) -> str:
        """The label word this fake predicts after the prompt ``words``."""
        start = len(words) - 1 - words[::-1].index(self.text_field)
        query = words[start + 1 : -1]
        if "good" in query:
            return "positive"
        if "bad" in query:
            return "negative"
        first = words.index(self.label_field)
        return words[first + 1]

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        words_of = {v: k for k, v in self.vocab.items()}
        texts = []
        out = np.full(token_sets.shape, 0.05)
        for row, prompt in enumerate(prompts):
            words = [words_of[i] for i in prompt]
            texts.append(" ".join(words))
            wanted = self._id(self.answer(words))
            out[row, token_sets[row] == wanted] = 1.0
        self.calls.append(texts)
        return out / out.sum(axis=1, keepdims=True)

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        raise AssertionError("PromptPATE never generates")
