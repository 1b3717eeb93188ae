"""Rendering the dashboard's answers: its templates, its error pages and its redirects.

Kept apart from the routes so that every handler answers the same way: a page for a browser,
JSON for the page's own ``fetch`` calls (``Accept: application/json``), and 303 after a POST so
that a reload never submits a form twice. Templates use ``StrictUndefined``: a variable a
handler forgot to pass is an error in the tests, not an empty cell on a page.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import StrictUndefined

from app.privacy.display import budget_percent, delta_text, epsilon_text
from app.ui.charts import spend_bar

#: Every δ shown as text (``1.44e-4``, not ``0.00014450867052023122``): the one rule's.
three_digits = delta_text


TEMPLATES = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")
TEMPLATES.env.globals.update(spend_bar=spend_bar)
# One rule with the CLI and the API's texts (app.privacy.display): truncated, never rounded up.
TEMPLATES.env.filters["budget_percent"] = budget_percent  # a share: a whole percent
TEMPLATES.env.filters["spend"] = epsilon_text  # every ε: planned, charged, spent, left, budgets
TEMPLATES.env.filters["three_digits"] = delta_text  # every δ
TEMPLATES.env.undefined = StrictUndefined  # a missing variable is a bug, not an empty string


def wants_json(request: Request) -> bool:
    """Whether the caller is the page's own script (it asks for JSON), not the browser."""
    return "application/json" in request.headers.get("accept", "")


def page(request: Request, name: str, ui: Any, **context: Any) -> HTMLResponse:
    """Template ``name`` for the signed-in ``ui`` (None on the sign-in page)."""
    return TEMPLATES.TemplateResponse(request, name, {"ui": ui, **context})


def error_page(request: Request, status: int, message: str, ui: Any = None) -> Response:
    """An error as a page (or as the API's error JSON for a script). The message is the
    services' own, written never to quote private text."""
    if wants_json(request):
        return JSONResponse({"error": {"message": message}}, status_code=status)
    return TEMPLATES.TemplateResponse(
        request,
        "error.html",
        {"ui": ui or getattr(request.state, "ui", None), "status": status, "message": message},
        status_code=status,
    )


def see_other(url: str) -> RedirectResponse:
    """Where to go after a POST (303: the browser follows with a GET)."""
    return RedirectResponse(url, status_code=303)
