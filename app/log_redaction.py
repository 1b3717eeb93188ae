"""Log records keep an exception's type and location, never its message.

Exception messages from the data layer quote what they failed on: a database driver's error
carries the statement's parameters (record text), a codec error the string it could not
encode. Any logger may receive one -- uvicorn's "Exception in ASGI application", Starlette's,
a library's -- and each has its own handlers, so a filter on some handler would miss others.
The redaction therefore sits in the log record factory, which every logger of the process
uses: a record created with ``exc_info`` gets, instead of the traceback, one line per
exception of the chain naming its type and the frames it passed through (file, line,
function: code, not data); an exception passed as a formatting argument, or as the message
itself, becomes its type name. Stack frames' source lines are not repeated either, only
their locations.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

_lock = threading.Lock()
_installed = False
_MAX_FRAMES = 12  # the innermost frames; enough to find the place, short enough to read


def describe_exception(exc: BaseException) -> str:
    """The chain of ``exc`` (outermost first, then what it came from) as types and
    locations, with no message."""
    lines: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = type(current)
        name = kind.__qualname__
        if kind.__module__ != "builtins":
            name = f"{kind.__module__}.{name}"
        prefix = "from " if lines else ""
        lines.append(f"{prefix}{name} (message withheld) at {_where(current.__traceback__)}")
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return "\n".join(lines)


def _where(tb: TracebackType | None) -> str:
    if tb is None:
        return "an unknown location"
    frames = traceback.extract_tb(tb)[-_MAX_FRAMES:]
    return " <- ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(frames))


def _redact(record: logging.LogRecord) -> logging.LogRecord:
    if isinstance(record.msg, BaseException):  # log.error(err): the message is the exception
        record.msg = f"{type(record.msg).__name__} (message withheld)"
    exc_info = record.exc_info
    if exc_info and exc_info[1] is not None:
        described = describe_exception(exc_info[1])
        if record.args:  # the message is %-formatted later: keep its percents literal
            described = described.replace("%", "%%")
        record.msg = f"{record.msg}\n{described}"
        record.exc_info, record.exc_text = None, None
    if isinstance(record.args, tuple) and any(
        isinstance(arg, BaseException) for arg in record.args
    ):
        record.args = tuple(
            f"{type(arg).__name__} (message withheld)" if isinstance(arg, BaseException) else arg
            for arg in record.args
        )
    elif isinstance(record.args, dict) and any(
        isinstance(arg, BaseException) for arg in record.args.values()
    ):
        record.args = {
            key: f"{type(arg).__name__} (message withheld)"
            if isinstance(arg, BaseException)
            else arg
            for key, arg in record.args.items()
        }
    return record


def install_log_redaction() -> None:
    """Make every log record of this process redact exceptions (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        previous: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _redact(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)
        _installed = True
