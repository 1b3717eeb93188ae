"""Every error is JSON ``{"error": {"code": ..., "message": ..., ...details}}``.

Messages name the problem (a field, a limit, an id) and never echo request input: a
validation error names the failing field and the rule, not the value (which could be private
record text or a query).
"""

from __future__ import annotations

import logging
import traceback
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app.services.errors import ServiceError

log = logging.getLogger(__name__)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, **extra}}, status_code=status, headers=headers
    )


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


def describe_request_errors(errors: list[Any]) -> tuple[str, list[dict[str, str]]]:
    fields = []
    for item in errors:
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        fields.append({"field": _location(tuple(item.get("loc", ()))), "message": message})
    text = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return text.replace("\n", " ") or "invalid request", fields


async def _service_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.error_code, exc.message, headers, **exc.extra)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) else _status_code_name(exc.status_code)
    return error_response(
        exc.status_code, _status_code_name(exc.status_code), message, exc.headers or None
    )


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    message, fields = describe_request_errors(list(exc.errors()))
    return error_response(422, "invalid", message, fields=fields)


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    # The type and the stack, not the message: a message may quote data.
    stack = "".join(traceback.format_tb(exc.__traceback__))
    log.error("unhandled %s in a request\n%s", type(exc).__name__, stack)
    return error_response(500, "internal", "internal error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
