"""How the ``dpsyn`` commands report a problem: one line on stderr, exit status 2.

A command that runs methods reads private records, and a method's error message is the
method author's text (a plug-in's as much as ours): it is shown only once it passed the
record-text check (:mod:`app.synthesis.record_text`) against the records the command read,
which it names to :func:`reported_errors` as it reads them (:meth:`PrivateRecords.read`).
An error that quotes one is shown as withheld; an unexpected one whose message (or the
message of an exception it came from) quotes one loses its traceback's messages too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import typer
from pydantic import ValidationError
from rich.console import Console

from app.llm.base import BackendError
from app.log_redaction import describe_exception
from app.privacy.calibration import CalibrationError
from app.results import SynthesisError
from app.synthesis.data import DataError, Record
from app.synthesis.record_text import WITHHELD, RecordText
from app.synthesis.tasks import TaskError

err = Console(stderr=True)

# Errors whose messages name the problem for the user; checked for record text before they
# are shown (a method raises them too).
USER_ERRORS: tuple[type[Exception], ...] = (
    DataError,
    TaskError,
    SynthesisError,
    CalibrationError,
    BackendError,
    FileNotFoundError,
    ValueError,
)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on one line; the caller raises the returned Exit."""
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


class PrivateRecords:
    """The private records a command has read so far, to check its errors against.

    Holds references only: the check (:class:`RecordText`) is built when an error is being
    reported, so a run that succeeds pays nothing for it. Empty until the command reads its
    records: an error raised before then cannot quote them."""

    def __init__(self) -> None:
        self._read: list[Sequence[Record]] = []

    def read(self, *records: Sequence[Record]) -> None:
        """The command has read ``records`` (its private set; eval's test split too)."""
        self._read.extend(records)

    def _text(self) -> RecordText:
        return RecordText.of(record for records in self._read for record in records)

    def scrub(self, message: str) -> str:
        """``message``, or :data:`WITHHELD` if it quotes a record read so far."""
        return self._text().scrub(message) if self._read else message

    def quoted_in_chain(self, error: BaseException) -> bool:
        """Whether ``error``, or an exception it was raised from, quotes a record."""
        if not self._read:
            return False
        text, seen = self._text(), set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            if text.quoted_in(str(current)):
                return True
            current = current.__cause__ or current.__context__
        return False


@contextmanager
def reported_errors() -> Iterator[PrivateRecords]:
    """Turn validation and user errors raised inside the block into a one-line exit, each
    checked against the private records the block names on what this yields.

    Any other error goes on as it is (a traceback, for a bug), unless its chain quotes a
    record: then it is one line naming its type, with the message withheld, then its chain
    as types and locations (:func:`~app.log_redaction.describe_exception`), exit status 1."""
    private = PrivateRecords()
    try:
        yield private
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise fail(private.scrub(f"{where}: {first['msg']}")) from None
    except USER_ERRORS as error:
        raise fail(private.scrub(str(error))) from None
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise  # a command's own exit (fail() and typer's), already reported
    except Exception as error:
        if not private.quoted_in_chain(error):
            raise
        line = f"error: {type(error).__name__}: {WITHHELD}"
        err.print(line, markup=False, highlight=False, soft_wrap=True)
        err.print(describe_exception(error), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
