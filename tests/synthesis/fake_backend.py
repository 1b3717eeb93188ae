"""The deterministic fake backend; it lives in :mod:`app.llm.fake` (the workers' test hook
builds it, and no production module imports ``tests``). :class:`BlankLabelBackend`, a variant
for tests only, makes one label's demonstrations come out empty."""

from collections.abc import Sequence

import numpy as np

from app.llm.fake import EOS, NEWLINE, FakeBackend

__all__ = ["EOS", "NEWLINE", "BlankLabelBackend", "FakeBackend"]


class BlankLabelBackend(FakeBackend):
    """The fake backend whose stop token (a newline) wins every step, the first included
    (``stop_after=0``), and whose public top-K for ``label`` holds only words of whitespace.

    A demonstration may not stop while it is blank, so every other label's demonstration takes
    a word (``w{i}``) and then stops; ``label``'s has nothing but whitespace to take, stays
    blank to T_max, and is left out of the prompt. Works the same under any noise: the
    candidates decide it, not the released distribution. ``label`` is the word the prompts
    write for it (its verbaliser: TREC's "Location" is written "location")."""

    def __init__(self, label: str, marker: str = "Question:") -> None:
        super().__init__(stop_after=0, marker=marker)
        self.label = label
        self.blanks = [self._id(" " * width) for width in range(1, 201)]

    def _target(self, prompt: Sequence[int]) -> str:
        """The label a generation prompt is for: the word before ``\\n{marker}`` last."""
        marker = self.vocab[self.marker]
        at = max(i for i, token in enumerate(prompt) if token == marker)
        return self.words([prompt[at - 2]])[0]

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        top = super().top_k(prompts, k)
        for row, prompt in enumerate(prompts):
            if self._target(prompt) == self.label:
                top[row] = self.blanks[:k]
        return top
