"""Request dependencies: the database session and the caller's API key.

``SessionDep`` is one session per request; services commit explicitly, and whatever is not
committed is rolled back when the request ends. ``AdminKey`` admits only ``admin`` keys;
``AnyKey`` also ``prompts:read`` keys (for the prompt routes). Both carry the tenant, which
every service call is scoped to.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.db.models import KeyScope
from app.llm.provider import BackendProvider
from app.services.errors import ForbiddenError, UnauthorizedError
from app.services.tenants import authenticate
from app.settings import Settings
from workers.queue import JobQueue


def get_session(request: Request) -> Iterator[Session]:
    # GET requests never write: on SQLite they use an engine whose transactions do not take
    # the write lock, so reads do not queue behind jobs and admissions.
    factory = request.app.state.read_sessions if request.method == "GET" else None
    session = (factory or request.app.state.sessions)()
    try:
        yield session
    finally:
        session.rollback()
        session.close()


SessionDep = Annotated[Session, Depends(get_session)]


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_queue(request: Request) -> JobQueue:
    return request.app.state.queue


def get_provider(request: Request) -> BackendProvider:
    return request.app.state.backend_provider


SettingsDep = Annotated[Settings, Depends(get_settings)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
ProviderDep = Annotated[BackendProvider, Depends(get_provider)]

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key: `Authorization: Bearer <key>`. Admin keys can do everything "
    "for their tenant; prompts:read keys can only read prompts and complete with them.",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's tenant and scope."""

    tenant_id: str
    key_id: str
    scope: KeyScope


def get_principal(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    key = authenticate(session, credentials.credentials)
    if key is None:
        raise UnauthorizedError("invalid or revoked API key")
    principal = Principal(tenant_id=key.tenant_id, key_id=key.id, scope=KeyScope(key.scope))
    session.rollback()  # end the read (SQLite would otherwise hold its write lock)
    return principal


def require_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if principal.scope is not KeyScope.ADMIN:
        raise ForbiddenError(
            f"this API key has scope {principal.scope.value!r}: it can only read prompts "
            "and complete with them; this endpoint needs an 'admin' key",
            code="insufficient_scope",
        )
    return principal


AnyKey = Annotated[Principal, Depends(get_principal)]
AdminKey = Annotated[Principal, Depends(require_admin)]
