"""The OpenAPI document declares every error status a route can answer with.

FastAPI documents the success response and 422 of a route; the service's other errors come
from dependencies (401/403 from the key, 503 from the database), from the request limits
middleware (404/413/422/429, ``app.api.limits``) and from services (404/409/413/415/422).
Clients and contract testers (schemathesis checks that every status it sees is declared)
need the full list, so it is derived here from what each route is made of -- whether it
takes a key, an admin key, path parameters, query parameters, a body -- plus the few
route-specific cases in ``_SPECIFIC``; ``declare_errors`` adds them to each router's routes
(one declared set per path: a route's methods share it) with the common error body
(``ErrorBody``), which ``install_openapi`` puts into the document's schemas.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.api.deps import get_principal, require_admin
from app.api.schemas import ErrorBody

_DESCRIPTIONS = {
    400: "Malformed request body (not JSON, or nested too deeply).",
    401: "Missing, invalid or revoked API key (or metrics token).",
    403: "The key's scope does not allow this route.",
    404: "No such resource for this tenant (another tenant's answers 404 too).",
    409: "Conflicts with the resource's state (budget exceeded, job finished, ...).",
    413: "Request body, upload, record count or one record over its limit.",
    415: "Unsupported Content-Type.",
    422: "Invalid parameters or body; the message names the field and the rule.",
    429: "Rate limit of this API key exceeded; see Retry-After.",
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
    ("POST", "/v1/jobs"): {404, 409},
    ("POST", "/v1/jobs/{job_id}/cancel"): {409},
    ("GET", "/metrics"): {401},
}


def _calls(dependant: Dependant, target: Any) -> bool:
    return any(dep.call is target or _calls(dep, target) for dep in dependant.dependencies)


def error_statuses(route: APIRoute, method: str) -> set[int]:
    """The error statuses ``route`` answers ``method`` with."""
    dependant = route.dependant
    statuses = {422, 503}  # 422: any query with a NUL character (app.api.limits)
    if _calls(dependant, get_principal):
        statuses |= {401, 429}
    if _calls(dependant, require_admin):
        statuses.add(403)
    if dependant.path_params:
        statuses.add(404)
    has_body = dependant.body_params or (
        route.openapi_extra and "requestBody" in route.openapi_extra
    )
    if has_body:
        statuses |= {400, 413}
    statuses |= _SPECIFIC.get((method, route.path), set())
    return statuses


def _error_response(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": _DESCRIPTIONS[status],
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
        for method in route.methods:
            statuses |= error_statuses(route, method)
        for status in sorted(statuses):
            route.responses[status] = _error_response(status)


def install_openapi(app: FastAPI) -> None:
    """Put the error body the declared responses refer to into the document's schemas."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(error_schema.pop("$defs", {}))
        schemas["ErrorBody"] = error_schema
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
