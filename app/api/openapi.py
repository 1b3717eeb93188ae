"""The OpenAPI document declares every error status a route can answer with.

FastAPI documents the success response and 422 of a route; the service's other errors come
from dependencies (401/403 from the key, 503 from the database), from the request checks
(404/413/422, ``app.api.request_checks``), the rate limits (429, ``app.api.limits``) and from
services (404/409/413/415/422). The OpenAI-compatible routes answer 400 where the others
answer 422 (``app.api.openai_errors``).
Clients and contract testers (schemathesis checks that every status it sees is declared)
need the full list, so it is derived here from what each route is made of -- whether it
takes a key, an admin key, path parameters, query parameters, a body -- plus the few
route-specific cases in ``_SPECIFIC``; ``declare_errors`` adds them to each router's routes
(one declared set per path: a route's methods share it) with the common error body
(``ErrorBody``), which ``install_openapi`` puts into the document's schemas.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.deps import SCOPE_CHECKS, dataset_ref, get_principal
from app.api.openai_errors import OpenAIRoute
from app.api.schemas import ErrorBody

_DESCRIPTIONS = {
    400: "Malformed request body (not JSON, or nested too deeply).",
    401: "Missing, invalid or revoked API key (or metrics token).",
    403: "The key's scope does not allow this route.",
    404: "No such resource for this tenant (another tenant's answers 404 too).",
    409: "Conflicts with the resource's state (budget exceeded, job finished, ...) or with "
    "the server's model (a soft prompt trained for another model, or served by vLLM).",
    413: "Request body, upload, record count or one record over its limit.",
    415: "Unsupported Content-Type.",
    422: "Invalid parameters or body; the message names the field and the rule.",
    429: "Rate limit of this API key, this tenant's share of job planning, or this key's or "
    "tenant's share of the model (answers at once, prompt tokens a minute) exceeded; see "
    "Retry-After.",
    502: "The model server refused the request (its HTTP status is named); asking again "
    "fails the same way.",
    503: "The database is unavailable or the service is overloaded; see Retry-After.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}
# Statuses that only some routes answer with, by (method, path).
_SPECIFIC: dict[tuple[str, str], set[int]] = {
    ("POST", "/v1/datasets"): {413, 415},
    ("DELETE", "/v1/datasets/{dataset_id}"): {409},
    ("PUT", "/v1/datasets/{dataset_id}/budget"): {409},
    ("PUT", "/v1/datasets/{dataset_id}/counts-public"): {409},
    ("POST", "/v1/jobs"): {404, 409},
    # The body names a dataset (404 unknown) that may be deleted, unfunded or over budget.
    ("POST", "/v1/jobs/quote"): {404, 409},
    ("POST", "/v1/advice"): {404, 409},
    ("POST", "/v1/advice/{advice_id}/cancel"): {409},
    ("POST", "/v1/jobs/{job_id}/cancel"): {409},
    # A soft prompt has no chat messages form (format=messages).
    ("GET", "/v1/prompts/{prompt_id}"): {409},
    # A soft prompt on a vLLM server, or on a server running another model (409); the
    # model server refused the call (502).
    ("POST", "/v1/prompts/{prompt_id}/complete"): {409, 502},
    ("GET", "/metrics"): {401},
    ("GET", "/v1/fleet/ledgers.csv"): {404},  # ?tenant= names no tenant
    # ?dataset_id= by a name several of the tenant's datasets share
    ("GET", "/v1/jobs"): {409},
    ("GET", "/v1/prompts"): {409},
    # The body's model names a prompt (404 unknown) that may be a soft prompt the engine
    # cannot take, or have no chat form (409); the model server refused the call (502).
    ("POST", "/v1/chat/completions"): {404, 409, 502},
    ("POST", "/v1/completions"): {404, 409, 502},
}
# On the OpenAI-compatible routes an invalid request is OpenAI's 400 (app.api.openai_errors).
_OPENAI_DESCRIPTIONS = {
    400: "Invalid request (OpenAI's invalid_request_error, as OpenAI and vLLM answer it): "
    "the message names the field and the rule, param the field (messages[0].content, "
    "max_tokens, ...); or a body that is not JSON.",
}


def _calls(dependant: Dependant, target: Any) -> bool:
    return any(dep.call is target or _calls(dep, target) for dep in dependant.dependencies)


def _has_path_params(dependant: Dependant) -> bool:
    return bool(dependant.path_params) or any(_has_path_params(d) for d in dependant.dependencies)


def error_statuses(route: APIRoute, method: str) -> set[int]:
    """The error statuses ``route`` answers ``method`` with."""
    dependant = route.dependant
    # 422 (400 on the OpenAI-compatible routes): any query with a NUL character
    # (app.api.request_checks)
    statuses = {400 if isinstance(route, OpenAIRoute) else 422, 503}
    if _calls(dependant, get_principal):
        statuses |= {401, 429}
    if any(_calls(dependant, check) for check in SCOPE_CHECKS):
        statuses.add(403)
    if _has_path_params(dependant):
        statuses.add(404)
    if _calls(dependant, dataset_ref):
        statuses.add(409)  # a dataset name that several of the tenant's datasets share
    has_body = dependant.body_params or (
        route.openapi_extra and "requestBody" in route.openapi_extra
    )
    if has_body:
        statuses |= {400, 413}
    statuses |= _SPECIFIC.get((method, route.path), set())
    return statuses


def _error_response(status: int, openai: bool) -> dict[str, Any]:
    descriptions = {**_DESCRIPTIONS, **_OPENAI_DESCRIPTIONS} if openai else _DESCRIPTIONS
    response: dict[str, Any] = {
        "description": descriptions[status],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }
    if status in (429, 503):
        response["headers"] = _RETRY_AFTER
    return response


def declare_errors(router: APIRouter) -> None:
    """Add the error responses to each route of ``router`` (before it is included)."""
    for route in router.routes:
        if not isinstance(route, APIRoute):
            continue
        statuses: set[int] = set()
        for method in route.methods or ():
            statuses |= error_statuses(route, method)
        for status in sorted(statuses):
            route.responses[status] = _error_response(status, isinstance(route, OpenAIRoute))


_DATASET = "/v1/datasets/{dataset_id}"
_BUDGET = "/v1/datasets/{dataset_id}/budget"
_COUNTS = "/v1/datasets/{dataset_id}/counts-public"
_JOB, _CANCEL = "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel"
_PROMPT, _COMPLETE = "/v1/prompts/{prompt_id}", "/v1/prompts/{prompt_id}/complete"
_SOFT = "/v1/prompts/{prompt_id}/soft-prompt"
_KEY = "/v1/keys/{key_id}"
# The operations a new or listed dataset's ID opens.
_DATASET_USES = [
    ("GET", _DATASET),
    ("DELETE", _DATASET),
    ("GET", _BUDGET),
    ("PUT", _BUDGET),
    ("PUT", _COUNTS),
]
# Where an ID comes from (operation, status, JSON pointer into its body) and which operations'
# path parameter it fills: OpenAPI links, which clients and stateful testers follow.
_LINK_SOURCES: list[tuple[str, str, str, str, str, list[tuple[str, str]]]] = [
    (
        "POST",
        "/v1/datasets",
        "201",
        "/id",
        "dataset_id",
        _DATASET_USES,
    ),
    (
        "GET",
        "/v1/datasets",
        "200",
        "/0/id",
        "dataset_id",
        _DATASET_USES,
    ),
    ("PUT", _BUDGET, "200", "/dataset_id", "dataset_id", [("GET", _BUDGET), ("GET", _DATASET)]),
    ("POST", "/v1/jobs", "201", "/id", "job_id", [("GET", _JOB), ("POST", _CANCEL)]),
    ("GET", "/v1/jobs", "200", "/0/id", "job_id", [("GET", _JOB), ("POST", _CANCEL)]),
    (
        "GET",
        _JOB,
        "200",
        "/prompt_id",
        "prompt_id",
        [("GET", _PROMPT), ("POST", _COMPLETE), ("GET", _SOFT)],
    ),
    (
        "GET",
        "/v1/prompts",
        "200",
        "/0/id",
        "prompt_id",
        [("GET", _PROMPT), ("POST", _COMPLETE), ("GET", _SOFT)],
    ),
    ("POST", "/v1/keys", "201", "/id", "key_id", [("DELETE", _KEY)]),
    ("GET", "/v1/keys", "200", "/0/id", "key_id", [("DELETE", _KEY)]),
]
# A new dataset's ID also fills the body of a job submission.
_BODY_LINKS = [("POST", "/v1/datasets", "201", "/id", ("POST", "/v1/jobs"), "dataset_id")]


def _add_links(document: dict[str, Any]) -> None:
    paths = document["paths"]

    def operation_id(method: str, path: str) -> str | None:
        return paths.get(path, {}).get(method.lower(), {}).get("operationId")

    for method, path, status, pointer, name, targets in _LINK_SOURCES:
        response = paths.get(path, {}).get(method.lower(), {}).get("responses", {}).get(status)
        if response is None:
            continue
        links = response.setdefault("links", {})
        for target_method, target_path in targets:
            target = operation_id(target_method, target_path)
            if target is not None:
                links[target] = {
                    "operationId": target,
                    "parameters": {name: f"$response.body#{pointer}"},
                }
    for method, path, status, pointer, (target_method, target_path), field in _BODY_LINKS:
        response = paths.get(path, {}).get(method.lower(), {}).get("responses", {}).get(status)
        target = operation_id(target_method, target_path)
        if response is not None and target is not None:
            response.setdefault("links", {})[target] = {
                "operationId": target,
                "requestBody": {field: f"$response.body#{pointer}", "epsilon": 1.0},
            }


class AllowHeader:
    """A 405 names every method the path has (RFC 9110 ``Allow``). Starlette answers with the
    methods of the first route whose path matches, and the service has several routes per
    path (GET and DELETE of a dataset), so a 405 would list only some."""

    def __init__(self, app: ASGIApp, document: Callable[[], dict[str, Any]]) -> None:
        self.app, self._document = app, document
        self._paths: list[tuple[re.Pattern[str], str]] | None = None

    def _allowed(self, path: str) -> str | None:
        if self._paths is None:
            self._paths = [
                (
                    re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)) + "$"),
                    ", ".join(sorted(method.upper() for method in operations)),
                )
                for template, operations in self._document()["paths"].items()
            ]
        return next((allowed for pattern, allowed in self._paths if pattern.match(path)), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allowed = self._allowed(scope["path"])
                if allowed is not None:
                    headers = [
                        (k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"
                    ]
                    message = {**message, "headers": [*headers, (b"allow", allowed.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_allow)


def _drop_fastapi_422(document: dict[str, Any], routes: Iterable[APIRoute]) -> None:
    """FastAPI declares a 422 on every route with a body or parameters; the OpenAI-compatible
    routes never answer it (their invalid requests are 400s), so it is not declared there."""
    for route in routes:
        for method in route.methods or ():
            operation = document["paths"].get(route.path, {}).get(method.lower(), {})
            operation.get("responses", {}).pop("422", None)


def install_openapi(app: FastAPI) -> None:
    """Put the error body the declared responses refer to into the document's schemas, and
    the links between operations (an ID one returns is a parameter of others)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(error_schema.pop("$defs", {}))
        schemas["ErrorBody"] = error_schema
        _drop_fastapi_422(document, getattr(app.state, "openai_routes", ()))
        _add_links(document)
        app.openapi_schema = document
        return document

    # FastAPI's documented way to customise the schema; mypy forbids assigning a method.
    app.openapi = openapi  # type: ignore[method-assign]
    app.add_middleware(AllowHeader, document=openapi)
