"""Mounting the dashboard: its static files, the cookie signer, and its security headers.

Every ``/ui`` response gets a Content-Security-Policy that allows only this origin's own
scripts, styles and forms (nothing inline, nothing from elsewhere: the JavaScript and CSS are
files of this package), and is never framed, cached or sent with a referrer.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.datastructures import MutableHeaders
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.settings import Settings
from app.ui.session import make_signer

STATIC_DIR = Path(__file__).resolve().parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class DashboardHeaders:
    """Adds :data:`HEADERS` to every response under ``/ui``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == "/ui" or path.startswith("/ui/")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install_dashboard(app: FastAPI, settings: Settings) -> None:
    """The signer (``app.state.ui_signer``), ``/ui/static`` and the headers middleware; the
    pages themselves are the router :mod:`app.api.routes.ui`."""
    secret = settings.ui_secret.get_secret_value() if settings.ui_secret else None
    app.state.ui_signer = make_signer(secret)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.add_middleware(DashboardHeaders)
    app.add_api_route("/", to_dashboard, methods=["GET"], include_in_schema=False)


async def to_dashboard() -> RedirectResponse:
    """``/`` is the dashboard: someone who types the service's address lands on a page, not
    on a 404. 307, so the browser goes on to ``/ui``; the API's own paths
    (``/v1/...``, ``/healthz``, ``/docs``) are untouched."""
    return RedirectResponse("/ui", status_code=307)
