"""Tenants and their API keys.

A raw key is shown once, when it is created; only its SHA-256 (hex) is stored. A key has one
scope: ``admin`` (everything of its tenant), ``prompts:read`` (read prompts and complete
with them: differentially private outputs only) or ``org:read`` (every tenant's budgets,
ledgers and job counts, read-only; only the operator creates one). A key may have
a name (:func:`check_key_name`), and records when it was last used (:func:`touch_last_used`).

Functions here add rows and flush; the caller commits (``session_scope`` does). Revoking a
key or disabling a tenant also drops it from this process's key-lookup caches
(:mod:`app.services.key_cache`), at once and again when the session commits, so that a lookup
racing the commit cannot keep the old answer.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import event, func, or_, select, update
from sqlalchemy.orm import Session

from app.db.models import ApiKey, KeyScope, Tenant, now
from app.services import key_cache
from app.services.errors import ConflictError, ForbiddenError, InvalidError, NotFoundError
from app.services.key_cache import LAST_USED_INTERVAL_S
from app.services.rows import tenant_row
from app.services.storable import TENANT_NAME_MAX_CHARS, column_size, text_problem, too_long

KEY_PREFIX = "dpsyn_"
BOOTSTRAP_TENANT = "default"


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def new_raw_key() -> str:
    """A fresh key: a prefix (easy to spot in a leaked file) and 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


KEY_NAME_MAX_CHARS = column_size(ApiKey.name)
KEY_NAME_RULE = (
    f"a key's name is 1 to {KEY_NAME_MAX_CHARS} printable characters once trimmed "
    "(no tabs, newlines or other control characters)"
)


def key_name_problem(name: str) -> str | None:
    """Why ``name`` (already trimmed) cannot name a key, or None. Says the rule and the size,
    never the name (a key's name is the creator's text, shown back only once stored)."""
    if not name:
        return f"must not be blank: {KEY_NAME_RULE}"
    if len(name) > KEY_NAME_MAX_CHARS:
        return too_long("the key name", len(name), KEY_NAME_MAX_CHARS)
    if not name.isprintable():
        return f"contains a character that is not printable: {KEY_NAME_RULE}"
    return text_problem(name)


def check_key_name(name: str | None) -> str | None:
    """The trimmed name (None: no name), or :class:`InvalidError` (422) naming the rule."""
    if name is None:
        return None
    trimmed = name.strip()
    problem = key_name_problem(trimmed)
    if problem:
        raise InvalidError(f"name: {problem}")
    return trimmed


def create_api_key(
    session: Session, tenant_id: str, scope: KeyScope = KeyScope.ADMIN, name: str | None = None
) -> tuple[ApiKey, str]:
    """A new key of ``scope`` for the tenant, named ``name`` (trimmed; None: unnamed): the row
    and the raw key (shown once)."""
    checked = check_key_name(name)
    raw = new_raw_key()
    key = ApiKey(
        tenant_id=tenant_id, key_hash=hash_key(raw), scope=KeyScope(scope).value, name=checked
    )
    session.add(key)
    session.flush()
    return key, raw


def create_tenant_key(
    session: Session, tenant_id: str, scope: KeyScope, name: str | None = None
) -> tuple[ApiKey, str]:
    """A key a tenant's admin key creates for its own tenant (``POST /v1/keys``): never an
    ``org:read`` key, which sees every tenant and so is the operator's to create (403)."""
    if KeyScope(scope) is KeyScope.ORG_READ:
        raise ForbiddenError(
            "scope: an org:read key reads every tenant's budgets, so only the operator creates "
            "one ('dpsyn admin keys create TENANT --scope org:read'); a tenant's admin key can "
            "create admin and prompts:read keys",
            code="org_key_operator_only",
        )
    return create_api_key(session, tenant_id, scope, name)


def touch_last_used(session: Session, key_ids: str | Sequence[str], at: datetime) -> bool:
    """Record that ``key_ids`` (one key or several) were used at ``at``, each unless a time
    less than a minute older is already stored (another process wrote it): one conditional
    UPDATE, committed. Whether a row changed. Called by authentication only when this
    process's throttle says so (:class:`app.services.key_cache.LastUsedThrottle`), its uses
    gathered for a second (``app.api.deps.note_key_used``)."""
    ids = [key_ids] if isinstance(key_ids, str) else list(key_ids)
    since = at - timedelta(seconds=LAST_USED_INTERVAL_S)
    result = session.execute(
        update(ApiKey)
        .where(
            ApiKey.id.in_(ids),
            or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < since),
        )
        .values(last_used_at=at)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return bool(getattr(result, "rowcount", 0))


def create_tenant(session: Session, name: str) -> tuple[Tenant, str]:
    """A new tenant and its first admin key: ``(tenant, raw_admin_key)``.

    Raises :class:`InvalidError` for a name the tenants table cannot hold (blank, too long,
    not storable text) and :class:`ConflictError` when the name is taken. The caller commits.
    """
    check_tenant_name(name)
    if session.scalars(select(Tenant).where(Tenant.name == name)).first() is not None:
        raise ConflictError(f"a tenant named {name!r} already exists", code="tenant_exists")
    tenant = Tenant(name=name)
    session.add(tenant)
    session.flush()
    _, raw = create_api_key(session, tenant.id, KeyScope.ADMIN)
    return tenant, raw


def check_tenant_name(name: str) -> None:
    """Refuse a tenant name that is blank or that its column cannot store (422)."""
    if not name.strip():
        raise InvalidError("name: a tenant name must not be blank")
    problem = too_long("the tenant name", len(name), TENANT_NAME_MAX_CHARS) or text_problem(name)
    if problem:
        raise InvalidError(f"name: {problem}")


def authenticate(session: Session, raw_key: str) -> ApiKey | None:
    """The live key whose hash matches ``raw_key``, or None (also when its tenant is
    disabled: one query, so that disabling a tenant locks out every key at once)."""
    return session.scalars(
        select(ApiKey)
        .join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(
            ApiKey.key_hash == hash_key(raw_key),
            ApiKey.revoked.is_(False),
            Tenant.disabled_at.is_(None),
        )
    ).first()


#: Hashes asked per query by :func:`live_keys_by_hash` (well under every database's limit
#: of bound parameters).
HASHES_PER_QUERY = 500


def live_keys_by_hash(session: Session, hashes: Sequence[str]) -> dict[str, ApiKey]:
    """The live keys (not revoked, tenant enabled) among ``hashes``, by hash: the bulk form
    of :func:`authenticate`, with which one query renews every key a process remembers."""
    found: dict[str, ApiKey] = {}
    for start in range(0, len(hashes), HASHES_PER_QUERY):
        chunk = list(hashes[start : start + HASHES_PER_QUERY])
        rows = session.scalars(
            select(ApiKey)
            .join(Tenant, Tenant.id == ApiKey.tenant_id)
            .where(
                ApiKey.key_hash.in_(chunk),
                ApiKey.revoked.is_(False),
                Tenant.disabled_at.is_(None),
            )
        )
        found.update((row.key_hash, row) for row in rows)
    return found


def recently_used_keys(session: Session, limit: int) -> list[ApiKey]:
    """The live keys used most recently (those never used last), at most ``limit``: what a
    starting API process remembers before its first request."""
    return list(
        session.scalars(
            select(ApiKey)
            .join(Tenant, Tenant.id == ApiKey.tenant_id)
            .where(ApiKey.revoked.is_(False), Tenant.disabled_at.is_(None))
            .order_by(ApiKey.last_used_at.desc().nulls_last(), ApiKey.id)
            .limit(limit)
        )
    )


def live_key(session: Session, key_id: str) -> ApiKey | None:
    """The key with this ID if it is still live (not revoked, tenant enabled), else
    None: the dashboard's session re-checks its key on every request with it, so revoking the
    key or disabling the tenant ends the session at once."""
    return session.scalars(
        select(ApiKey)
        .join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(
            ApiKey.id == key_id,
            ApiKey.revoked.is_(False),
            Tenant.disabled_at.is_(None),
        )
    ).first()


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


def _forget_now_and_on_commit(session: Session, forget: Callable[[], None]) -> None:
    """Invalidate cached lookups now, and once more when ``session`` commits (a lookup made
    before the commit still saw the old row; the second call also makes it unstorable)."""
    forget()
    event.listen(session, "after_commit", lambda _session: forget(), once=True)


def revoke_key(session: Session, tenant_id: str, key_id: str) -> ApiKey:
    key = tenant_row(session, ApiKey, tenant_id, key_id, "API key")
    key.revoked = True
    _forget_now_and_on_commit(session, lambda: key_cache.forget_key(key_id))
    return key


# --- Operator administration (``dpsyn admin``; no HTTP route crosses tenants) ---------------


def find_tenant(session: Session, name_or_id: str) -> Tenant:
    """The tenant named ``name_or_id``, or else with that ID."""
    tenant = session.scalars(
        select(Tenant)
        .where(or_(Tenant.name == name_or_id, Tenant.id == name_or_id))
        .order_by(Tenant.name != name_or_id)  # a name wins over an ID that looks the same
    ).first()
    if tenant is None:
        raise NotFoundError(f"no tenant named or with ID {name_or_id!r}", code="tenant_not_found")
    return tenant


def list_tenants(session: Session) -> list[tuple[Tenant, int]]:
    """Every tenant with its number of live (unrevoked) keys, by name."""
    live = (
        select(ApiKey.tenant_id, func.count().label("live"))
        .where(ApiKey.revoked.is_(False))
        .group_by(ApiKey.tenant_id)
        .subquery()
    )
    rows = session.execute(
        select(Tenant, func.coalesce(live.c.live, 0))
        .outerjoin(live, live.c.tenant_id == Tenant.id)
        .order_by(Tenant.name)
    )
    return [(tenant, int(count)) for tenant, count in rows]


def set_disabled(session: Session, tenant: Tenant, disabled: bool) -> Tenant:
    """Disable (every key refused) or enable a tenant; nothing else of it changes."""
    if disabled and tenant.disabled_at is None:
        tenant.disabled_at = now()
        tenant_id = tenant.id
        _forget_now_and_on_commit(session, lambda: key_cache.forget_tenant(tenant_id))
    elif not disabled:
        tenant.disabled_at = None
    session.flush()
    return tenant


def create_key_for(
    session: Session, tenant: Tenant, scope: KeyScope, name: str | None = None
) -> tuple[ApiKey, str]:
    """A new key for an enabled tenant (a key of a disabled one would not work); the
    operator's path, the only one that creates ``org:read`` keys."""
    if tenant.disabled_at is not None:
        raise ConflictError(
            f"tenant {tenant.name!r} is disabled; enable it first", code="tenant_disabled"
        )
    return create_api_key(session, tenant.id, scope, name)


def revoke_key_by_id(session: Session, key_id: str) -> ApiKey:
    """Revoke a key of any tenant, by its ID (idempotent)."""
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFoundError(f"no API key with ID {key_id!r}", code="key_not_found")
    key.revoked = True
    _forget_now_and_on_commit(session, lambda: key_cache.forget_key(key_id))
    session.flush()
    return key
