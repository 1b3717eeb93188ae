"""Dashboard sessions: an API key exchanged for a signed cookie, and CSRF tokens.

The cookie never holds the key: it holds the key's *ID*, an expiry and a random nonce,
signed with HMAC-SHA256 (itsdangerous, one salt per purpose) under a server secret
(``DPSYN_UI_SECRET``, or one kept by ``dpsyn serve``, or a random one per process). Every
request re-reads the key by ID and refuses a revoked key or a disabled tenant, so a session
never outlives its key's access, and needs the session's row on the server
(:mod:`app.ui.store`), which signing out deletes. The cookie is HttpOnly (scripts cannot read
it), SameSite=Strict (no other site's request carries it) and Secure when served over HTTPS.

CSRF: each form carries a token, the nonce's signature under the CSRF salt, which only a page
rendered for this session contains; a POST without the matching token is refused. The sign-in
form has a token of its own, bound to a short-lived pre-session cookie, so another site
cannot sign a browser in under its own key either (login CSRF).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import itsdangerous
from starlette.responses import Response

SESSION_COOKIE = "dpsyn_session"
LOGIN_COOKIE = "dpsyn_login"
LOGIN_TTL_S = 3600  # how long a sign-in form stays usable
COOKIE_PATH = "/ui"  # the dashboard's cookies are never sent to the API's routes


@dataclass(frozen=True)
class UiSession:
    """A verified, unexpired session cookie: whose key, until when, and its CSRF nonce."""

    key_id: str
    nonce: str
    expires: int


class Signer:
    """Signs and verifies the dashboard's cookies and CSRF tokens with one secret.

    The signing is itsdangerous's (HMAC-SHA256, the salt derives one key per purpose, the
    comparison is constant time): a maintained library, the one Starlette's own sessions
    use, in place of a hand-written HMAC. A value is ``body.signature``, ``body`` the
    payload's JSON in URL-safe base64.
    """

    def __init__(self, secret: str | bytes) -> None:
        # One key per purpose, so that no signed value of one kind passes as another.
        self._cookies = itsdangerous.Signer(
            secret, salt="dpsyn-ui-cookie", digest_method=hashlib.sha256
        )
        self._csrf = itsdangerous.Signer(secret, salt="dpsyn-ui-csrf", digest_method=hashlib.sha256)

    def _sign(self, payload: dict[str, Any]) -> str:
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        return self._cookies.sign(itsdangerous.base64_encode(body)).decode("ascii")

    def _unsign(self, value: str | None, purpose: str, now: float) -> dict[str, Any] | None:
        """The payload of a cookie this server signed for ``purpose`` and still valid."""
        if not value or len(value) > 4096:
            return None
        try:
            payload = json.loads(itsdangerous.base64_decode(self._cookies.unsign(value)))
        except (itsdangerous.BadData, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(payload, dict) or payload.get("p") != purpose:
            return None
        expires = payload.get("exp")
        if not isinstance(expires, int) or expires <= now:
            return None
        return payload

    def new_session(self, key_id: str, ttl_s: int, now: float | None = None) -> str:
        """The cookie value of a new session of ``key_id``, expiring in ``ttl_s``."""
        now = time.time() if now is None else now
        return self._sign(
            {"p": "session", "k": key_id, "n": secrets.token_urlsafe(16), "exp": int(now + ttl_s)}
        )

    def read_session(self, value: str | None, now: float | None = None) -> UiSession | None:
        payload = self._unsign(value, "session", time.time() if now is None else now)
        if payload is None or not isinstance(payload.get("k"), str):
            return None
        return UiSession(key_id=payload["k"], nonce=str(payload["n"]), expires=payload["exp"])

    def new_login(self, now: float | None = None) -> tuple[str, str]:
        """A pre-session cookie for the sign-in form, and the form's CSRF token."""
        now = time.time() if now is None else now
        nonce = secrets.token_urlsafe(16)
        cookie = self._sign({"p": "login", "n": nonce, "exp": int(now + LOGIN_TTL_S)})
        return cookie, self.csrf_token(nonce)

    def login_nonce(self, value: str | None, now: float | None = None) -> str | None:
        payload = self._unsign(value, "login", time.time() if now is None else now)
        return None if payload is None else str(payload["n"])

    def csrf_token(self, nonce: str) -> str:
        return self._csrf.get_signature(nonce).decode("ascii")

    def check_csrf(self, nonce: str | None, token: str | None) -> bool:
        """Whether ``token`` is the CSRF token of ``nonce`` (constant time)."""
        if not nonce or not token:
            return False
        return self._csrf.verify_signature(nonce, token)


def make_signer(secret: str | None) -> Signer:
    """The signer of the configured secret, else of a random one (sessions then last only as
    long as this process, and are not shared between replicas)."""
    return Signer(secret if secret else secrets.token_bytes(32))


def set_cookie(response: Response, name: str, value: str, ttl_s: int, *, secure: bool) -> None:
    """Set one of the dashboard's cookies with the attributes described above: scripts cannot
    read it, no other site's request carries it, and over HTTPS it never travels in clear."""
    response.set_cookie(
        name,
        value,
        max_age=ttl_s,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def forget_cookie(response: Response, name: str) -> None:
    """Tell the browser to drop one of the dashboard's cookies (same path as it was set)."""
    response.delete_cookie(name, path=COOKIE_PATH)
