"""Which tokens are text: what a demonstration or an answer may be written with.

Shared by the local backend (which leaves the others out of its vocabulary once, from the
tokenizer's pieces) and the vLLM backend (which leaves them out of each top-k answer, from
the server's decoding of each candidate). Issue 43: Gemma's ``<start_of_image>`` (token
255999, not marked special in the converted tokenizer) and a private-use character reached a
served prompt. A public function of the tokenizer: leaving these out of the candidate
vocabulary is post-processing of public data, at no privacy cost.
"""

from __future__ import annotations

import re
import unicodedata

#: A piece that is a control or template token (``<start_of_image>``, ``<unused7>``,
#: ``[multimodal]``), not a byte-fallback piece (``<0xE2>``).
_CONTROL_PIECE = re.compile(r"^(<(?!0x[0-9A-Fa-f]{2}>)[^<>\s]+>|\[[A-Za-z_@|]+\])$")
# Unicode categories that are never text in a demonstration: private use, surrogates,
# unassigned, and control characters other than tab, newline and carriage return.
_NOT_TEXT_CATEGORIES = frozenset({"Co", "Cs", "Cn"})


def is_text_piece(piece: str | None) -> bool:
    """Whether a token's piece (or its decoded text) is text: not empty, not a control or
    template token, and without a private-use, unassigned or control character."""
    if not piece or _CONTROL_PIECE.match(piece.strip()):
        return False
    for char in piece:
        category = unicodedata.category(char)
        if category in _NOT_TEXT_CATEGORIES or (category == "Cc" and char not in "\t\n\r"):
            return False
    return True
