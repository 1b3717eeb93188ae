"""Finds private record text in what a method says: its outputs, its stats, its errors.

A method may only release DP outputs, and an error it raises is shown to the client as it is
(the worker's job record, ``dpsyn synthesize``). A message that quotes a record is a leak
whatever the method meant: this module is the one check, used by the method contract
(``app.contract``, on every output of a run) and by the worker and the local commands (on
every error message of method code, before it is stored or printed).

What counts as record text: any run of :data:`WINDOW` characters of a record's text (its
words, case and spacing as stored), or a whole record of at least :data:`SHORTEST`
characters. Shorter records ("yes", a lone label word) are not looked for: they are as
likely to be public words as a quote. Looking costs a set of the message's windows and one
lookup per window of every record, so it belongs on error paths and in tests, not on a
request path.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.synthesis.data import Record

#: Characters of a record that make a quote: long enough that public text (the task's
#: instruction, a label's name, a template) does not match by chance.
WINDOW = 24
#: A record shorter than :data:`WINDOW` is looked for whole when it is at least this long.
SHORTEST = 12

#: What replaces a message that quoted a record (it names no record and no count).
WITHHELD = "the method's message was withheld: it quoted private record text"


class RecordText:
    """The private records' text, to look for in anything a method wrote."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._texts = [t for t in texts if len(t) >= SHORTEST]

    @classmethod
    def of(cls, records: Iterable[Record]) -> RecordText:
        return cls(record.text for record in records)

    def quoted_in(self, text: str) -> bool:
        """True when ``text`` holds :data:`WINDOW` characters of a record, or a whole
        record of :data:`SHORTEST` characters or more."""
        if not text or not self._texts:
            return False
        windows = {text[i : i + WINDOW] for i in range(max(0, len(text) - WINDOW + 1))}
        for record in self._texts:
            if len(record) < WINDOW:
                if record in text:
                    return True
                continue
            if any(record[i : i + WINDOW] in windows for i in range(len(record) - WINDOW + 1)):
                return True
        return False

    def scrub(self, message: str) -> str:
        """``message``, or :data:`WITHHELD` when it quotes a record."""
        return WITHHELD if self.quoted_in(message) else message
