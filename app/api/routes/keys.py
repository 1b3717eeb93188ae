"""API keys of the caller's tenant (admin keys only).

A key may be named, and lists show when each was last used. A tenant's admin key
creates admin and prompts:read keys only: an org:read key reads every tenant's budgets, so
only the operator creates one (``dpsyn admin keys create``), and asking for one here is a 403.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AdminKey, SessionDep
from app.api.schemas import KeyCreate, KeyCreated, KeyPublic
from app.services import tenants as service

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post(
    "", status_code=201, response_model=KeyCreated, summary="Create a key (shown only once)"
)
def create_key(body: KeyCreate, principal: AdminKey, session: SessionDep) -> KeyCreated:
    key, raw = service.create_tenant_key(session, principal.tenant_id, body.scope, body.name)
    session.commit()
    return KeyCreated(**KeyPublic.from_row(key).model_dump(), key=raw)


@router.get("", response_model=list[KeyPublic])
def list_keys(principal: AdminKey, session: SessionDep) -> list[KeyPublic]:
    return [KeyPublic.from_row(key) for key in service.list_keys(session, principal.tenant_id)]


@router.delete("/{key_id}", response_model=KeyPublic, summary="Revoke a key")
def revoke_key(key_id: str, principal: AdminKey, session: SessionDep) -> KeyPublic:
    key = service.revoke_key(session, principal.tenant_id, key_id)
    session.commit()
    return KeyPublic.from_row(key)
