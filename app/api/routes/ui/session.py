"""The dashboard's sessions and CSRF checks, as FastAPI dependencies.

Sign-in exchanges an API key for a signed session cookie (:mod:`app.ui.session`) and a row on
the server (:mod:`app.ui.store`). Every signed-in request re-reads that row and the key
(signed out, revoked or disabled: the session is over) and spends the key's rate limit as its
API calls do; failed sign-ins are throttled per client address (:mod:`app.api.limits`). Every
POST's form must carry the session's CSRF token.

What the handlers need of the application (the signer, the limiter, the session factories) is
a dependency here, as :mod:`app.api.deps` is for the REST routes, so no handler reads
``app.state`` itself and a test can override any of them.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException

from app.api.deps import Principal, note_key_used, principal_of
from app.api.limits import Limiter
from app.db.models import KeyScope
from app.services.errors import ForbiddenError, InvalidError
from app.services.tenants import authenticate
from app.ui.render import TEMPLATES, see_other
from app.ui.session import (
    LOGIN_COOKIE,
    LOGIN_TTL_S,
    SESSION_COOKIE,
    Signer,
    UiSession,
    forget_cookie,
    set_cookie,
)
from app.ui.store import close_session, open_session, session_key


class SignInRequiredError(Exception):
    """No valid session: the browser is sent to the sign-in page."""


@dataclass(frozen=True)
class Ui:
    """The signed-in browser: its key's principal, its session, and its CSRF token."""

    principal: Principal
    session: UiSession
    csrf: str

    @property
    def is_admin(self) -> bool:
        return self.principal.scope is KeyScope.ADMIN

    @property
    def is_org(self) -> bool:
        """An org:read sign-in: the fleet page only."""
        return self.principal.scope is KeyScope.ORG_READ

    def accepts(self, token: str | None) -> bool:
        """Whether ``token`` is this session's CSRF token (constant time)."""
        return bool(token) and hmac.compare_digest(self.csrf, token or "")


# --- what the handlers need of the application ----------------------------------------------


async def get_signer(request: Request) -> Signer:
    signer: Signer = request.app.state.ui_signer
    return signer


async def get_limiter(request: Request) -> Limiter:
    limiter: Limiter = request.app.state.limiter
    return limiter


async def get_sessions(request: Request) -> sessionmaker[Session]:
    """The factory of writing sessions (opening and closing a sign-in writes its row)."""
    sessions: sessionmaker[Session] = request.app.state.sessions
    return sessions


async def get_read_sessions(request: Request) -> sessionmaker[Session]:
    """The factory of read-only sessions (key and session checks never take a write lock)."""
    sessions: sessionmaker[Session] = request.app.state.read_sessions
    return sessions


SignerDep = Annotated[Signer, Depends(get_signer)]
LimiterDep = Annotated[Limiter, Depends(get_limiter)]
SessionsDep = Annotated[sessionmaker[Session], Depends(get_sessions)]
ReadSessionsDep = Annotated[sessionmaker[Session], Depends(get_read_sessions)]


# --- the signed-in browser ------------------------------------------------------------------


def _principal_of(sessions: sessionmaker[Session], ui_session: UiSession) -> Principal | None:
    """The session's key, if the session is still open and its key still live."""
    with sessions() as session:
        return principal_of(session_key(session, ui_session))


async def session_tenant(request: Request) -> str | None:
    """The planning lane's tenant of a dashboard request (``app.api.planning_lane``): the
    signed-in session's key's; None without a live session (the route signs the browser
    out)."""
    signer: Signer = request.app.state.ui_signer
    session = signer.read_session(request.cookies.get(SESSION_COOKIE))
    if session is None:
        return None
    principal = await run_in_threadpool(_principal_of, request.app.state.read_sessions, session)
    return None if principal is None else principal.tenant_id


async def signed_in(request: Request, signer: SignerDep, sessions: ReadSessionsDep) -> Ui:
    """The signed-in session: signed by this server, not signed out, its key re-checked now
    (revoked or disabled: signed out). Not charged to the key's rate limit (see
    :func:`current_ui`), so that signing out works when the key is over it."""
    session = signer.read_session(request.cookies.get(SESSION_COOKIE))
    if session is None:
        raise SignInRequiredError
    principal = await run_in_threadpool(_principal_of, sessions, session)
    if principal is None:
        raise SignInRequiredError
    ui = Ui(principal=principal, session=session, csrf=signer.csrf_token(session.nonce))
    request.state.ui = ui  # error pages show the signed-in header too
    return ui


async def current_ui(
    request: Request, ui: Annotated[Ui, Depends(signed_in)], limiter: LimiterDep
) -> Ui:
    """The signed-in session, charged to its key's rate limit as the API's requests are, and
    recorded as a use of the key (throttled as the API's: :func:`app.api.deps.note_key_used`)."""
    await limiter.charge(limiter.key, ui.principal.key_id)
    note_key_used(request.app, ui.principal.key_id)
    return ui


_ORG_PAGES = "an org:read sign-in sees the fleet page only (/ui/fleet)"


async def tenant_ui(ui: Annotated[Ui, Depends(current_ui)]) -> Ui:
    """A session of one tenant's key (admin or prompts:read): never an org:read one."""
    if ui.is_org:
        raise ForbiddenError(
            f"this page shows one tenant's data: {_ORG_PAGES}", code="insufficient_scope"
        )
    return ui


async def admin_ui(ui: Annotated[Ui, Depends(current_ui)]) -> Ui:
    """An admin session: a ``prompts:read`` sign-in sees the prompt pages only, an org:read
    one the fleet page only."""
    if not ui.is_admin:
        whom = _ORG_PAGES if ui.is_org else "a prompts:read sign-in sees prompts only"
        raise ForbiddenError(f"this page needs an admin key: {whom}", code="insufficient_scope")
    return ui


async def org_ui(ui: Annotated[Ui, Depends(current_ui)]) -> Ui:
    """An org:read session (the fleet page): every tenant's budgets, read-only."""
    if not ui.is_org:
        raise ForbiddenError(
            "this page shows every tenant's budgets: it needs an org:read key (created by the "
            f"operator); this {ui.principal.scope.value} key sees its own tenant only",
            code="org_key_required",
        )
    return ui


SignedInUi = Annotated[Ui, Depends(signed_in)]
CurrentUi = Annotated[Ui, Depends(current_ui)]  # any scope: the home page's redirect only
AnyUi = Annotated[Ui, Depends(tenant_ui)]
AdminUi = Annotated[Ui, Depends(admin_ui)]
OrgUi = Annotated[Ui, Depends(org_ui)]


async def checked_form(request: Request, ui: Ui, **limits: Any) -> FormData:
    """The POST's form, once its CSRF token (form field ``csrf``) matches the session's."""
    try:
        form = await request.form(**limits)
    except MultiPartException as err:
        raise InvalidError(f"invalid form: {err.message}") from None
    token = form.get("csrf")
    if not ui.accepts(token if isinstance(token, str) else None):
        await form.close()
        raise ForbiddenError("missing or wrong CSRF token: reload the page", code="csrf")
    return form


# --- signing in and out ----------------------------------------------------------------------

#: Where a sign-in lands without a (usable) ``next``: the dashboard's home.
LANDING = "/ui"
# A dashboard path (``/ui``, ``/ui/...`` or ``/ui?...``) of printable ASCII without a
# backslash: never another site (``//host``, ``https://host``, ``/\host``) nor ``/uix``.
_NEXT = re.compile(r"/ui(?:[/?][\x21-\x5b\x5d-\x7e]*)?")
_NEXT_MAX = 2000


def safe_next(value: object) -> str | None:
    """``value`` if it is a page of this dashboard to land on after signing in, else None.

    Only a same-site relative path under ``/ui`` is honoured, so that a link to the sign-in
    page cannot send a browser to another site once it is signed in (an open redirect); the
    sign-in and sign-out pages themselves are no landing either."""
    if not isinstance(value, str) or len(value) > _NEXT_MAX or not _NEXT.fullmatch(value):
        return None
    path = value.split("?", 1)[0]
    if "//" in value or ".." in path or "%2e" in path.lower():  # no host, no way out of /ui
        return None
    if path.rstrip("/") in ("/ui/login", "/ui/logout"):
        return None
    return value


def login_form(
    request: Request,
    signer: Signer,
    error: str | None = None,
    status: int = 200,
    next_path: str | None = None,
) -> Response:
    """The sign-in page, with a fresh pre-session cookie and the form's token bound to it
    (so that no other site can sign this browser in under its own key), and the page to go
    back to once signed in (``next``, when :func:`safe_next` accepts it)."""
    cookie, token = signer.new_login()
    context = {"ui": None, "csrf": token, "error": error, "next": safe_next(next_path)}
    response = TEMPLATES.TemplateResponse(request, "login.html", context, status_code=status)
    secure = request.url.scheme == "https"
    set_cookie(response, LOGIN_COOKIE, cookie, LOGIN_TTL_S, secure=secure)
    return response


def login_token_ok(request: Request, signer: Signer, token: str | None) -> bool:
    """Whether the sign-in form's token is the one of this browser's pre-session cookie."""
    return signer.check_csrf(signer.login_nonce(request.cookies.get(LOGIN_COOKIE)), token)


def _key_id(sessions: sessionmaker[Session], raw_key: str) -> str | None:
    with sessions() as session:
        key = authenticate(session, raw_key)
        return None if key is None else key.id


async def check_key(
    limiter: Limiter, address: str, sessions: sessionmaker[Session], raw_key: str
) -> str | None:
    """The ID of ``raw_key`` if it is a live key, else None. Past the address's allowance of
    failed sign-ins, RateLimitedError before any lookup; a good key's own rate limit is
    spent as an API request's would be."""
    await limiter.attempt(limiter.signin_failures, address)
    key_id = await run_in_threadpool(_key_id, sessions, raw_key)
    if key_id is None:
        return None
    await limiter.succeeded(limiter.signin_failures, address)
    await limiter.charge(limiter.key, key_id)
    return key_id


def _open(sessions: sessionmaker[Session], ui_session: UiSession) -> None:
    with sessions() as session:
        open_session(session, ui_session)


def _close(sessions: sessionmaker[Session], ui_session: UiSession) -> None:
    with sessions() as session:
        close_session(session, ui_session)


async def start_session(
    request: Request,
    signer: Signer,
    sessions: sessionmaker[Session],
    key_id: str,
    ttl_s: int,
    next_path: str | None = None,
) -> Response:
    """Open a session of ``key_id`` (its row, then its cookie) and go to ``next_path`` if
    :func:`safe_next` accepts it (the page that sent the browser to sign in), else to the
    dashboard's home."""
    cookie = signer.new_session(key_id, ttl_s)
    session = signer.read_session(cookie)
    assert session is not None  # just signed
    await run_in_threadpool(_open, sessions, session)
    response = see_other(safe_next(next_path) or LANDING)
    set_cookie(response, SESSION_COOKIE, cookie, ttl_s, secure=request.url.scheme == "https")
    forget_cookie(response, LOGIN_COOKIE)
    return response


async def end_session(sessions: sessionmaker[Session], ui: Ui) -> Response:
    """Delete the session's row (a copy of the cookie opens nothing afterwards), forget the
    cookie and go to the sign-in page."""
    await run_in_threadpool(_close, sessions, ui.session)
    response = see_other("/ui/login")
    forget_cookie(response, SESSION_COOKIE)
    return response
