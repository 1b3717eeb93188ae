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

HTTP clients log what a peer wrote: httpx logs every response at INFO with its status line,
reason phrase included, and httpcore's DEBUG trace the raw status line and headers; a model
server or a proxy may put its input there (``HTTP/1.1 400 Question: <record> ...``).
:func:`quiet_http_client_logs` (part of :func:`install_log_redaction`) sets those libraries'
loggers to WARNING. Their warnings name hosts, URLs we built and retry counts; the one that
carries an exception (urllib3's "Retrying ... after connection broken by ...") has it
redacted to its type like any other.
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
#: The HTTP client libraries a dpsyn process may load: httpx and httpcore (the vLLM client, the
#: CLI's API client), httpx2 and httpcore2 (huggingface_hub's downloads), requests and urllib3
#: (gguf's), h11, h2 and hpack (the wire protocols under them; h11 also under uvicorn).
HTTP_CLIENT_LOGGERS = (
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "requests",
    "urllib3",
    "h11",
    "h2",
    "hpack",
)


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


def quiet_http_client_logs() -> None:
    """Set the HTTP client libraries' loggers to WARNING (a higher level set by an operator
    stays): their INFO and DEBUG lines quote what the peer answered. A level set on the
    logger itself outlasts ``logging.basicConfig``, uvicorn's log config
    (``disable_existing_loggers=False``) and Celery's root logger, which set other loggers."""
    for name in HTTP_CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:  # NOTSET included: it would inherit the root's
            logger.setLevel(logging.WARNING)


def install_log_redaction() -> None:
    """Make every log record of this process redact exceptions, and keep the HTTP clients'
    request lines out of the log (idempotent)."""
    global _installed
    quiet_http_client_logs()
    with _lock:
        if _installed:
            return
        previous: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _redact(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)
        _installed = True
