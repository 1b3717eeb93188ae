"""Every error is JSON ``{"error": {"code": ..., "message": ..., ...details}}``.

Messages name the problem (a field, a limit, an id) and never echo request input: a
validation error names the failing field and the rule, not the value (which could be private
record text or a query). A body is JSON whatever the numbers in it: a non-finite one (a spend
no finite epsilon covers) is written as null (``app.api.responses``), never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException
from starlette.types import Scope

from app.api.openai_errors import answers_as_openai, missing_prefix_hint, openai_param
from app.api.responses import FiniteJSONResponse
from app.llm.base import BackendError, TransientBackendError
from app.log_redaction import describe_exception
from app.services.errors import ServiceError

log = logging.getLogger(__name__)

# Errors that mean "the database cannot be reached or cannot serve now" (a refused or lost
# connection, a locked SQLite file), as opposed to a bad statement: the request may succeed
# later, so they answer 503, not 500. A pool that gave up waiting means the server is
# overloaded, not the database: ``app.api.overload`` answers it (503 ``overloaded``).
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
)
DATABASE_RETRY_AFTER_S = 5


# OpenAI's error types by status: every error body also has OpenAI's shape (``type`` and
# ``param`` beside ``code`` and ``message``), so that an OpenAI SDK reading the compatible
# endpoint (app.api.routes.openai) reports our errors as it reports OpenAI's.
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {
        "code": code,
        "message": message,
        "type": _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "api_error"),
        "param": None,
        **extra,
    }
    return FiniteJSONResponse({"error": body}, status_code=status, headers=headers)


def _status_code_name(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "error"


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        where, parts = parts[0], parts[1:]
        name = ".".join(parts) or "body"
        return name if where == "body" else f"{name} ({where})"
    return ".".join(parts) or "request"


def describe_request_errors(
    errors: list[Any], locate: Callable[[Mapping[str, Any]], str] | None = None
) -> tuple[str, list[dict[str, str]]]:
    """One message naming each failing field and its rule, and the fields as a list;
    ``locate`` names an error's field (by default the location, dotted)."""
    fields = []
    for item in errors:
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        field = locate(item) if locate else _location(tuple(item.get("loc", ())))
        fields.append({"field": field, "message": message})
    text = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return text.replace("\n", " ") or "invalid request", fields


def invalid_status(scope: Scope) -> int:
    """The status of an invalid request: OpenAI's 400 on the OpenAI-compatible routes (an
    SDK raises ``BadRequestError`` on it), the service's 422 elsewhere
    (``app.api.openai_errors``)."""
    return 400 if answers_as_openai(scope) else 422


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    status = invalid_status(request.scope) if exc.status == 422 else exc.status
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": str(DATABASE_RETRY_AFTER_S)}
    if status == 429 and "retry_after_s" in exc.extra:
        headers = {"Retry-After": str(exc.extra["retry_after_s"])}
    return error_response(status, exc.error_code, exc.message, headers, **exc.extra)


# What FastAPI says when a JSON body cannot be decoded other than by a syntax error (a
# RecursionError on deep nesting, a bad encoding): said with the field and the likely cause.
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else _status_code_name(exc.status_code)
    if exc.status_code == 400 and message == _FASTAPI_BODY_ERROR:
        message = "body: cannot be parsed as JSON (bad encoding, or nested too deeply)"
        return error_response(400, "invalid_json", message)
    hint = missing_prefix_hint(request.scope) if exc.status_code == 404 else None
    if hint is not None:  # an OpenAI client whose base URL lacks /v1
        return error_response(404, "base_url_without_v1", hint)
    return error_response(
        exc.status_code, _status_code_name(exc.status_code), message, exc.headers or None
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if answers_as_openai(request.scope):
        return _openai_invalid(errors, exc.body)
    message, fields = describe_request_errors(errors)
    return error_response(422, "invalid", message, fields=fields)


def _openai_invalid(errors: list[Any], body: Any) -> JSONResponse:
    """OpenAI's 400 ``invalid_request_error``: fields written as OpenAI writes them, and
    ``param`` the first failing one (OpenAI's body names one)."""

    def locate(error: Mapping[str, Any]) -> str:
        return openai_param(error, body) or "body"

    message, fields = describe_request_errors(errors, locate)
    param = next((p for e in errors if (p := openai_param(e, body)) is not None), None)
    return error_response(400, "invalid", message, fields=fields, param=param)


def _unavailable(code: str, what: str, exc: Exception) -> JSONResponse:
    """A 503 that names what is down and when to retry. The exception's message names hosts,
    files and statements, or quotes a prompt: the client gets none of it, the log only the
    type and where it was raised."""
    log.warning("%s unavailable: %s", what, describe_exception(exc))
    return error_response(
        503,
        code,
        f"the {what} is unavailable; retry later",
        {"Retry-After": str(DATABASE_RETRY_AFTER_S)},
    )


async def _database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    return _unavailable("database_unavailable", "database", exc)


async def _backend_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    """The model server is down (503, retry) or refused the call (502 ``backend_rejected``:
    asking again fails the same way, so no Retry-After). Its own message may quote the
    prompt: the client gets its HTTP status only."""
    if isinstance(exc, BackendError) and not isinstance(exc, TransientBackendError):
        log.warning("model backend refused a call: %s", describe_exception(exc))
        status = f" (HTTP {exc.status})" if exc.status is not None else ""
        return error_response(
            502,
            "backend_rejected",
            f"the model server refused the request{status}; it will refuse it again, so "
            "check the prompt and the query against the model server's limits",
        )
    return _unavailable("backend_unavailable", "model backend", exc)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    # The type and the stack, not the message: a message may quote data.
    log.error("unhandled exception in a request: %s", describe_exception(exc))
    return error_response(500, "internal", "internal error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    for kind in DATABASE_UNAVAILABLE:
        app.add_exception_handler(kind, _database_unavailable)
    app.add_exception_handler(BackendError, _backend_unavailable)
    app.add_exception_handler(Exception, _unexpected)
