"""Tenants and their API keys.

A raw key is shown once, when it is created; only its SHA-256 (hex) is stored. A key has one
scope: ``admin`` (everything of its tenant) or ``prompts:read`` (read prompts and complete
with them: differentially private outputs only).

Functions here add rows and flush; the caller commits (``session_scope`` does).
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, KeyScope, Tenant
from app.services.errors import ConflictError, NotFoundError

KEY_PREFIX = "dpsyn_"
BOOTSTRAP_TENANT = "default"


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def new_raw_key() -> str:
    """A fresh key: a prefix (easy to spot in a leaked file) and 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_api_key(
    session: Session, tenant_id: str, scope: KeyScope = KeyScope.ADMIN
) -> tuple[ApiKey, str]:
    """A new key of ``scope`` for the tenant: the row and the raw key (shown once)."""
    raw = new_raw_key()
    key = ApiKey(tenant_id=tenant_id, key_hash=hash_key(raw), scope=KeyScope(scope).value)
    session.add(key)
    session.flush()
    return key, raw


def create_tenant(session: Session, name: str) -> tuple[Tenant, str]:
    """A new tenant and its first admin key: ``(tenant, raw_admin_key)``.

    Raises :class:`ConflictError` when the name is taken. The caller commits.
    """
    if session.scalars(select(Tenant).where(Tenant.name == name)).first() is not None:
        raise ConflictError(f"a tenant named {name!r} already exists", code="tenant_exists")
    tenant = Tenant(name=name)
    session.add(tenant)
    session.flush()
    _, raw = create_api_key(session, tenant.id, KeyScope.ADMIN)
    return tenant, raw


def authenticate(session: Session, raw_key: str) -> ApiKey | None:
    """The live key whose hash matches ``raw_key``, or None."""
    key = session.scalars(select(ApiKey).where(ApiKey.key_hash == hash_key(raw_key))).first()
    if key is None or key.revoked:
        return None
    return key


def ensure_bootstrap_key(session: Session, raw_key: str) -> ApiKey:
    """Make ``raw_key`` an admin key of the tenant "default" (created if missing).

    Idempotent: nothing changes when the key already exists (even if revoked: a revoked
    bootstrap key stays revoked).
    """
    digest = hash_key(raw_key)
    existing = session.scalars(select(ApiKey).where(ApiKey.key_hash == digest)).first()
    if existing is not None:
        return existing
    tenant = session.scalars(select(Tenant).where(Tenant.name == BOOTSTRAP_TENANT)).first()
    if tenant is None:
        tenant = Tenant(name=BOOTSTRAP_TENANT)
        session.add(tenant)
        session.flush()
    key = ApiKey(tenant_id=tenant.id, key_hash=digest, scope=KeyScope.ADMIN.value)
    session.add(key)
    session.flush()
    return key


def list_keys(session: Session, tenant_id: str) -> list[ApiKey]:
    return list(
        session.scalars(
            select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.created_at)
        )
    )


def revoke_key(session: Session, tenant_id: str, key_id: str) -> ApiKey:
    key = session.scalars(
        select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id)
    ).first()
    if key is None:
        raise NotFoundError(f"API key {key_id!r} not found")
    key.revoked = True
    return key
