"""Checks every request meets before routing: its path and query, and its body's size.

They are checked by one ASGI middleware, ahead of routing and of any database
work, because each guards something a route cannot: a NUL character in a path or query would
reach the database (PostgreSQL refuses it with an error, not a miss); an ID of megabytes would
be echoed in a 404 message; a body is parsed whole by FastAPI before a route can look at its
size.

* Path: a NUL character, or a segment longer than ``MAX_SEGMENT`` (IDs are 32 characters),
  answers 404 ``not_found`` without echoing it.
* Query: a NUL character in a parameter answers 422 ``invalid`` naming the parameter (400 on
  the OpenAI-compatible routes, ``app.api.openai_errors``).
* Body: ``DPSYN_MAX_BODY_BYTES`` on every route but the dataset uploads (the API's and the
  dashboard's form), which have
  ``DPSYN_MAX_UPLOAD_BYTES`` (plus room for the multipart framing). A declared
  ``Content-Length`` over the limit answers 413 at once; a body sent without one is counted
  as it streams, and reading past the limit answers 413 (``too_large``).

The rates of keys and of failed authentications are :mod:`app.api.limits`'s.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response, invalid_status
from app.settings import Settings

MAX_SEGMENT = 128
UPLOAD_OVERHEAD = 64 * 1024  # multipart boundaries and the small form fields around the file
UPLOAD_PATHS = frozenset({"/v1/datasets", "/ui/datasets/upload"})  # the dashboard's form too


class BodyTooLarge(HTTPException):
    """Raised from the request's body stream once it passes its limit. An HTTPException,
    because FastAPI turns any other error while reading a body into a 400."""

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(413, too_large_message(limit, setting))
        self.limit = limit


def too_large_message(limit: int, setting: str) -> str:
    return f"the request body exceeds the limit of {limit} bytes ({setting})"


class RequestLimits:
    """The path, query and body checks of the module docstring, as ASGI middleware."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        limit, stated, setting = self._body_limit(scope)
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            response = error_response(
                413, "too_large", too_large_message(stated, setting), limit=stated
            )
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(stated, setting)
            return message

        await self.app(scope, limited, send)

    def _refusal(self, scope: Scope) -> Any:
        path: str = scope["path"]
        if "\x00" in path or any(len(part) > MAX_SEGMENT for part in path.split("/")):
            return error_response(
                404,
                "not_found",
                f"not found: no resource has such a path (IDs are at most {MAX_SEGMENT} "
                "characters and contain no NUL)",
            )
        query = scope.get("query_string", b"")
        if b"%00" in query.lower() or b"\x00" in query:
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
                if "\x00" in name or "\x00" in value:
                    shown = name.replace("\x00", "?")[:MAX_SEGMENT]
                    return error_response(
                        invalid_status(scope),
                        "invalid",
                        f"{shown} (query): contains a NUL character (U+0000)",
                        fields=[{"field": f"{shown} (query)", "message": "contains NUL"}],
                        param=shown,
                    )
        return None

    def _body_limit(self, scope: Scope) -> tuple[int, int, str]:
        """The bytes allowed, the limit to state, and its setting."""
        if scope["method"] == "POST" and scope["path"].rstrip("/") in UPLOAD_PATHS:
            upload = self.settings.max_upload_bytes
            return upload + UPLOAD_OVERHEAD, upload, "DPSYN_MAX_UPLOAD_BYTES"
        return self.settings.max_body_bytes, self.settings.max_body_bytes, "DPSYN_MAX_BODY_BYTES"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _body_too_large(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BodyTooLarge)
    return error_response(413, "too_large", str(exc.detail), limit=exc.limit)


def install_request_checks(app: FastAPI, settings: Settings) -> None:
    """The path, query and body checks, as middleware, and the 413 of a body that passes
    its limit while it streams."""
    app.add_middleware(RequestLimits, settings=settings)
    app.add_exception_handler(BodyTooLarge, _body_too_large)
