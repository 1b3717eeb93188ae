"""MemoBackend: repeated rows come from memory, in the caller's order, with equal answers."""

from __future__ import annotations

import numpy as np

from app.eval.memo import MemoBackend


class Counting:
    """Answers depend on the prompt and token set; every row asked is counted."""

    name, eos_id, newline_ids = "counting", 0, frozenset({1})

    def __init__(self) -> None:
        self.rows = 0

    def tokenize(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]

    def detokenize(self, ids):
        return " ".join("x" * i for i in ids)

    def top_k(self, prompts, k):
        return np.tile(np.arange(k), (len(prompts), 1))

    def next_token_probs(self, prompts, token_sets):
        self.rows += len(prompts)
        pairs = zip(prompts, token_sets, strict=True)
        raw = np.array([[sum(p) + 3 * t + 1 for t in s] for p, s in pairs])
        return raw / raw.sum(axis=1, keepdims=True)


def test_repeated_rows_are_answered_from_memory_in_order():
    inner = Counting()
    memo = MemoBackend(inner)
    prompts = [[1, 2], [3], [4, 4]]
    sets = np.array([[5, 6], [5, 6], [7, 8]])
    first = memo.next_token_probs(prompts, sets)
    assert inner.rows == 3 and memo.hits == 0
    again = memo.next_token_probs([prompts[2], [9], prompts[0]], sets[[2, 0, 0]])
    assert inner.rows == 4 and memo.hits == 2  # only [9] was new
    np.testing.assert_array_equal(again[0], first[2])
    np.testing.assert_array_equal(again[2], first[0])
    np.testing.assert_allclose(again[1], Counting().next_token_probs([[9]], sets[[0]])[0])
    # the same prompt with another token set is a different question
    memo.next_token_probs([prompts[0]], np.array([[7, 8]]))
    assert inner.rows == 5


def test_memory_is_bounded():
    inner = Counting()
    memo = MemoBackend(inner, max_entries=2)
    sets = np.array([[1, 2]])
    for i in range(5):
        memo.next_token_probs([[i]], sets)
    assert len(memo._memo) <= 2
    assert memo.name == "counting" and memo.tokenize("ab c") == [2, 1]
