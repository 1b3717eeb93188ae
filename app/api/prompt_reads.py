"""The prompt read's hot path: ``GET /v1/prompts/{id}`` answered from the caches in front of
the router.

A downstream app reads its prompt without limit, and a read whose key and body are both in
this process's caches needs nothing of FastAPI: no route matching over the API's routes, no
dependency solving, no thread. Measured before (bench/load.py, 16 clients): routing and
dependency solving were most of such a read's cost, 0.59 of a minimal route's throughput.

This middleware, the innermost (every check and limit in front of the router has run),
answers such a read exactly as the route would (the same bytes, status and headers; the
route's tests run against both: tests/api/test_prompt_reads.py): the key's rate is charged,
the address's failed-check limit applied, its last use noted, ``If-None-Match`` honoured.
Anything else is passed on untouched, to the route: a key or body not in the caches, a key
past half its cached life (the route renews it), an ``org:read`` key (the route's 403), any
other query, method or path. Nothing is charged twice: the decision to answer is taken
before the key's rate is charged.
"""

from __future__ import annotations

import re

from fastapi import FastAPI
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import key_lookups, note_key_used
from app.api.limits import Limiter, RateLimitedError, client_address
from app.api.routes.prompts import CachedBody, prompt_cache, tags_match
from app.db.models import KeyScope
from app.services.tenants import hash_key

_PATH = re.compile(r"^/v1/prompts/([^/]+)$")
_FORMATS = {b"": "body", b"format=text": "body", b"format=messages": "messages"}


class PromptReadFastPath:
    """``GET /v1/prompts/{id}`` from the caches (module docstring), else the router."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app, self.api = app, api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            response = await self._answer(scope)
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope) -> Response | None:
        found = _PATH.match(scope["path"])
        what = _FORMATS.get(scope.get("query_string", b""))
        if found is None or what is None:
            return None
        headers = dict(scope["headers"])
        scheme, _, raw_key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not raw_key.strip():
            return None
        key, renew = key_lookups(self.api).get_fresh(hash_key(raw_key.strip()))
        if key is None or renew or key.scope is KeyScope.ORG_READ:
            return None
        body: CachedBody | None = prompt_cache(self.api).get((what, key.tenant_id, found[1]))
        if body is None:
            return None
        refused = await self._charge(scope, key.key_id)
        if refused is not None:
            return refused
        note_key_used(self.api, key.key_id)
        if tags_match(headers.get(b"if-none-match", b"").decode("latin-1"), body.etag):
            return Response(status_code=304, headers={"ETag": body.etag})
        return Response(body.data, media_type="application/json", headers={"ETag": body.etag})

    async def _charge(self, scope: Scope, key_id: str) -> Response | None:
        """The limits the route's key check applies (``app.api.deps.authenticate_key``):
        the address's failed checks (attempted, then given back), the key's rate."""
        limiter: Limiter = self.api.state.limiter
        address = client_address(scope)
        try:
            await limiter.attempt(limiter.auth_failures, address)
            await limiter.succeeded(limiter.auth_failures, address)
            await limiter.charge(limiter.key, key_id)
        except RateLimitedError as err:
            return err.response()
        return None


def install_prompt_fast_path(app: FastAPI) -> None:
    """Add the fast path; call it before any other middleware, so that it runs last."""
    app.add_middleware(PromptReadFastPath, api=app)
