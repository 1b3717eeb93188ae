"""OpenAI's error conventions, on the OpenAI-compatible routes only.

An app reads ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models`` through an OpenAI
SDK or a framework built on one, and those tell errors apart by status: OpenAI (and vLLM's
server) answer an invalid request with a 400 ``invalid_request_error`` whose ``param`` names
the field, and the SDK raises ``BadRequestError`` on it; a framework that catches that error
misses a 422. The service's own routes keep FastAPI's 422, which their clients, the CLI and
the docs rely on. So the convention is chosen by route: the OpenAI-compatible routes are of
class :class:`OpenAIRoute`, and the error handlers (``app.api.errors``), the checks made
before routing (``app.api.request_checks``) and the OpenAPI document (``app.api.openapi``)
ask :func:`answers_as_openai`.

``param`` is written as OpenAI writes it (``messages[0].content``): the longest part of the
validation error's location that names something in the request body, so that a union's
member (pydantic puts ``str`` or ``list[ContentPart]`` into the location) is never shown as
a field.

An app whose ``base_url`` is the server's root (no ``/v1``) asks ``/chat/completions``: it
gets a 404 whose message says to add ``/v1`` (:func:`missing_prefix_hint`), where a bare 404
left it guessing. Only paths that are an OpenAI-compatible route's without its ``/v1`` get
the hint; other unknown paths keep the plain 404.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.types import Scope

#: The prefix of the OpenAI-compatible routes, which an app's ``base_url`` must end with.
OPENAI_PREFIX = "/v1"


class OpenAIRoute(APIRoute):
    """A route of the OpenAI-compatible API: its errors follow OpenAI's conventions (the
    class is the mark the error handlers look for; it routes as any ``APIRoute``)."""


def _route_path(scope: Scope) -> str:
    """The path the router matches: the request's, less the ``root_path`` it is mounted at
    (as Starlette's router does)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def install_openai_errors(app: FastAPI, router: APIRouter) -> None:
    """Tell the checks made before routing, and the 404 of an unknown path, which routes are
    ``router``'s OpenAI-compatible ones (``app.routes`` lists included routers, not their
    routes; a routed request names its own route)."""
    app.state.openai_routes = tuple(r for r in router.routes if isinstance(r, OpenAIRoute))


def _openai_routes(scope: Scope) -> tuple[OpenAIRoute, ...]:
    state = getattr(scope.get("app"), "state", None)
    return tuple(getattr(state, "openai_routes", ()))


def answers_as_openai(scope: Scope) -> bool:
    """Whether this request's errors take OpenAI's conventions: it was routed to an
    :class:`OpenAIRoute`, or, for a check made before routing, its path is one's."""
    route = scope.get("route")
    if route is not None:
        return isinstance(route, OpenAIRoute)
    path = _route_path(scope)
    return any(route.path_regex.match(path) for route in _openai_routes(scope))


def missing_prefix_hint(scope: Scope) -> str | None:
    """The message of a 404 for an OpenAI-compatible path asked without ``/v1`` (an app's
    ``base_url`` set to the server's root); None for any other path. The message names the
    route, never the path asked (request input)."""
    path = _route_path(scope)
    if path.startswith(OPENAI_PREFIX + "/"):
        return None
    full = OPENAI_PREFIX + path
    route = next((r for r in _openai_routes(scope) if r.path_regex.match(full)), None)
    if route is None:
        return None
    return (
        f"not found: this server's OpenAI-compatible API is under {OPENAI_PREFIX} "
        f"({route.path}); add {OPENAI_PREFIX} to the client's base URL, for example "
        f'OpenAI(base_url="http://HOST:PORT{OPENAI_PREFIX}")'
    )


def _child(value: Any, part: Any) -> tuple[bool, Any]:
    """Whether ``part`` names something in ``value`` (a key of a dict, an index of a list),
    and what it names."""
    if isinstance(value, dict) and isinstance(part, str) and part in value:
        return True, value[part]
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return True, value[part]
    return False, None


def openai_param(error: Mapping[str, Any], body: Any) -> str | None:
    """The request field a validation ``error`` points at, written as OpenAI writes it
    (``messages[0].content``); None where it names no field (a body that is not JSON, or
    none). ``body`` is the decoded request: the location is followed while each part names
    something in it, so a union member's tag (``str``, ``list[ContentPart]``) is cut off; a
    part that names nothing is kept only as a missing field's name."""
    loc = tuple(error.get("loc", ()))
    if not loc or loc[0] != "body":
        return str(loc[-1]) if len(loc) > 1 else None  # a query or header parameter
    names: list[str | int] = []
    value = body
    for index, part in enumerate(loc[1:], start=1):
        found, value = _child(value, part)
        if not found:
            if error.get("type") == "missing" and index == len(loc) - 1:
                names.append(part)
            break
        names.append(part)
    return _written(names)


def _written(names: Sequence[str | int]) -> str | None:
    """``["messages", 0, "content"]`` as ``messages[0].content``."""
    text = ""
    for name in names:
        text += f"[{name}]" if isinstance(name, int) else (f".{name}" if text else str(name))
    return text or None
