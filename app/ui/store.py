"""Dashboard sessions on the server: one ``ui_sessions`` row per sign-in.

The signed cookie (:mod:`app.ui.session`) proves that this server issued it; the row says that
it has not been signed out since. Signing out deletes the row, so a copy of the cookie
replayed afterwards is refused, on every replica alike, since the rows
live in the shared database. A row is named by the SHA-256 of the cookie's nonce, not the
nonce itself: the nonce also keys the session's CSRF tokens, and a database reader should get
nothing a browser would need.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session

from app.db.models import ApiKey, DashboardSession, now
from app.services.tenants import live_key
from app.ui.session import UiSession


def session_id(ui_session: UiSession) -> str:
    return hashlib.sha256(ui_session.nonce.encode("utf-8")).hexdigest()


def open_session(db: Session, ui_session: UiSession) -> None:
    """Record a new sign-in (and forget sessions that have expired meanwhile); commits."""
    db.execute(delete(DashboardSession).where(DashboardSession.expires_at < now()))
    db.add(
        DashboardSession(
            id=session_id(ui_session),
            key_id=ui_session.key_id,
            expires_at=datetime.fromtimestamp(ui_session.expires, UTC),
        )
    )
    db.commit()


def is_open(db: Session, ui_session: UiSession) -> bool:
    """Whether the cookie's session was opened here and not closed since. (Its expiry is the
    signed cookie's own, checked before this.)"""
    row = db.get(DashboardSession, session_id(ui_session))
    return row is not None and row.key_id == ui_session.key_id


def close_session(db: Session, ui_session: UiSession) -> None:
    """Sign out: the cookie, and any copy of it, opens nothing from now on; commits."""
    db.execute(delete(DashboardSession).where(DashboardSession.id == session_id(ui_session)))
    db.commit()


def session_key(db: Session, ui_session: UiSession) -> ApiKey | None:
    """The session's key, if the session is still open here and the key still live (not
    revoked, tenant enabled): checked on every request, so that signing out, revoking the key
    or disabling the tenant ends the session at once."""
    if not is_open(db, ui_session):
        return None
    return live_key(db, ui_session.key_id)
