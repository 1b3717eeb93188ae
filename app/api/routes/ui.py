"""The web dashboard (``/ui``): server-rendered pages over the same services as the API.

Sign-in exchanges an API key for a signed session cookie (:mod:`app.ui.session`); every page
re-checks that key, scopes every query to its tenant (another tenant's IDs are 404, as in the
API) and renders the API's own public schemas, so the dashboard shows exactly what the API
would: metadata and DP outputs, never a private record. A ``prompts:read`` session sees the
prompt pages only. Every POST carries the session's CSRF token. See docs/dashboard.md.

Each sign-in is also a row on the server (:mod:`app.ui.store`), deleted at sign-out, so a
copy of the cookie opens nothing afterwards. Every signed-in request spends the key's rate
limit as its API calls do, a model call also the stricter dashboard one, and failed sign-ins
are throttled per client address (:mod:`app.api.limits`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from jinja2 import StrictUndefined
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException

from app.api.deps import Principal, ProviderDep, QueueDep, SessionDep, SettingsDep
from app.api.errors import describe_request_errors
from app.api.limits import Limiter, RateLimitedError, client_address
from app.api.routes.datasets import store_file_upload
from app.api.schemas import (
    BudgetPublic,
    BudgetUpdate,
    DatasetPublic,
    DatasetUploadForm,
    JobCreate,
    JobPublic,
    PromptPublic,
    PromptSummary,
)
from app.db.models import TERMINAL_STATUSES, DatasetKind, KeyScope
from app.methods.registry import METHODS, get_method, param_fields
from app.privacy.accounting import Accounting
from app.services import budgets as budget_service
from app.services import datasets as dataset_service
from app.services import jobs as job_service
from app.services import prompts as prompt_service
from app.services.errors import ForbiddenError, InvalidError, NotFoundError, ServiceError
from app.services.tenants import authenticate, live_key
from app.synthesis.config import DEFAULT_SHOTS
from app.synthesis.tasks import BUILTIN_TASKS
from app.ui.charts import ChartPoint, spend_bar, spend_chart
from app.ui.session import LOGIN_COOKIE, LOGIN_TTL_S, SESSION_COOKIE, Signer, UiSession
from app.ui.store import close_session, is_open, open_session

TEMPLATES = Jinja2Templates(directory=Path(__file__).resolve().parents[2] / "ui" / "templates")
TEMPLATES.env.globals.update(spend_bar=spend_bar)
TEMPLATES.env.undefined = StrictUndefined  # a missing variable is a bug, not an empty string


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


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _error_page(request: Request, status: int, message: str, ui: Ui | None = None) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": {"message": message}}, status_code=status)
    return TEMPLATES.TemplateResponse(
        request,
        "error.html",
        {"ui": ui or getattr(request.state, "ui", None), "status": status, "message": message},
        status_code=status,
    )


class UiRoute(APIRoute):
    """Dashboard routes answer errors as pages (or JSON for the page's own fetches), and an
    unknown or expired session with the sign-in page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequiredError:
                if request.method == "GET" and not _wants_json(request):
                    response: Response = RedirectResponse("/ui/login", status_code=303)
                else:
                    response = _error_page(request, 401, "not signed in, or the session ended")
                if SESSION_COOKIE in request.cookies:  # ended or forged: forget it
                    response.delete_cookie(SESSION_COOKIE, path="/ui")
                return response
            except ServiceError as exc:
                return _error_page(request, exc.status, exc.message)
            except RateLimitedError as exc:
                response = _error_page(request, 429, exc.message)
                response.headers["Retry-After"] = str(exc.retry_after_s)
                return response
            except RequestValidationError as exc:
                return _error_page(request, 422, describe_request_errors(list(exc.errors()))[0])

        return handle


router = APIRouter(prefix="/ui", include_in_schema=False, route_class=UiRoute)


# --- session ---------------------------------------------------------------------------------


def _signer(request: Request) -> Signer:
    signer: Signer = request.app.state.ui_signer
    return signer


def _limiter(request: Request) -> Limiter:
    limiter: Limiter = request.app.state.limiter
    return limiter


def _principal_of(sessions: sessionmaker[Session], ui_session: UiSession) -> Principal | None:
    """The session's key, if the session is still open and its key still live."""
    with sessions() as session:
        if not is_open(session, ui_session):
            return None
        key = live_key(session, ui_session.key_id)
        if key is None:
            return None
        return Principal(tenant_id=key.tenant_id, key_id=key.id, scope=KeyScope(key.scope))


async def _signed_in(request: Request) -> Ui:
    """The signed-in session: signed by this server, not signed out, its key re-checked now
    (revoked or disabled: signed out)."""
    signer = _signer(request)
    session = signer.read_session(request.cookies.get(SESSION_COOKIE))
    if session is None:
        raise SignInRequiredError
    principal = await run_in_threadpool(_principal_of, request.app.state.read_sessions, session)
    if principal is None:
        raise SignInRequiredError
    ui = Ui(principal=principal, session=session, csrf=signer.csrf_token(session.nonce))
    request.state.ui = ui
    return ui


async def current_ui(request: Request) -> Ui:
    """The signed-in session, charged to its key's rate limit as the API's requests are."""
    ui = await _signed_in(request)
    limiter = _limiter(request)
    await limiter.charge(limiter.key, ui.principal.key_id)
    return ui


async def admin_ui(ui: Annotated[Ui, Depends(current_ui)]) -> Ui:
    if not ui.is_admin:
        raise ForbiddenError(
            "this page needs an admin key: a prompts:read sign-in sees prompts only",
            code="insufficient_scope",
        )
    return ui


AnyUi = Annotated[Ui, Depends(current_ui)]
AdminUi = Annotated[Ui, Depends(admin_ui)]


async def _checked_form(request: Request, ui: Ui, **limits: Any) -> FormData:
    """The POST's form, once its CSRF token (form field ``csrf``) matches the session's."""
    try:
        form = await request.form(**limits)
    except MultiPartException as err:
        raise InvalidError(f"invalid form: {err.message}") from None
    token = form.get("csrf")
    if not _signer(request).check_csrf(ui.session.nonce, token if isinstance(token, str) else None):
        raise ForbiddenError("missing or wrong CSRF token: reload the page", code="csrf")
    return form


def _text(form: FormData, name: str) -> str | None:
    """A non-empty text field of the form, stripped, else None."""
    value = form.get(name)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _page(request: Request, name: str, ui: Ui | None, **context: Any) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(request, name, {"ui": ui, **context})


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


@router.get("", response_class=HTMLResponse)
async def home(ui: AnyUi) -> Response:
    return _see_other("/ui/datasets" if ui.is_admin else "/ui/prompts")


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request) -> Response:
    return _login_form(request)


def _login_form(request: Request, error: str | None = None, status: int = 200) -> Response:
    cookie, token = _signer(request).new_login()
    response = TEMPLATES.TemplateResponse(
        request, "login.html", {"ui": None, "csrf": token, "error": error}, status_code=status
    )
    _set_cookie(request, response, LOGIN_COOKIE, cookie, LOGIN_TTL_S)
    return response


def _set_cookie(request: Request, response: Response, name: str, value: str, ttl: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=ttl,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _authenticate(sessions: sessionmaker[Session], raw_key: str) -> str | None:
    with sessions() as session:
        key = authenticate(session, raw_key)
        return None if key is None else key.id


def _open(sessions: sessionmaker[Session], ui_session: UiSession) -> None:
    with sessions() as session:
        open_session(session, ui_session)


def _close(sessions: sessionmaker[Session], ui_session: UiSession) -> None:
    with sessions() as session:
        close_session(session, ui_session)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, settings: SettingsDep) -> Response:
    """Exchange a key for a session. Failed sign-ins are throttled per client address: past
    ``DPSYN_SIGNIN_FAILURES_PER_MINUTE`` the form answers 429 before any key is looked up."""
    signer = _signer(request)
    form = await request.form()
    token = form.get("csrf")
    nonce = signer.login_nonce(request.cookies.get(LOGIN_COOKIE))
    if not signer.check_csrf(nonce, token if isinstance(token, str) else None):
        return _login_form(request, "The sign-in form expired: please try again.", 403)
    raw_key = _text(form, "api_key")
    if raw_key is None:
        return _login_form(request, "Enter an API key.", 422)
    limiter, address = _limiter(request), client_address(request.scope)
    try:
        await limiter.attempt(limiter.signin_failures, address)
        key_id = await run_in_threadpool(_authenticate, request.app.state.read_sessions, raw_key)
        if key_id is None:
            return _login_form(request, "Invalid or revoked API key.", 401)
        await limiter.succeeded(limiter.signin_failures, address)
        await limiter.charge(limiter.key, key_id)
    except RateLimitedError as exc:
        refused = _login_form(request, exc.message, 429)
        refused.headers["Retry-After"] = str(exc.retry_after_s)
        return refused
    ttl = settings.ui_session_ttl_s
    cookie = signer.new_session(key_id, ttl)
    session = signer.read_session(cookie)
    assert session is not None  # just signed
    await run_in_threadpool(_open, request.app.state.sessions, session)
    response = _see_other("/ui")
    _set_cookie(request, response, SESSION_COOKIE, cookie, ttl)
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request, ui: Annotated[Ui, Depends(_signed_in)]) -> Response:
    """End the session on the server (a copy of the cookie opens nothing afterwards). Not
    charged to the key's rate limit: signing out must work when the key is over it."""
    await _checked_form(request, ui)
    await run_in_threadpool(_close, request.app.state.sessions, ui.session)
    response = _see_other("/ui/login")
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response


# --- datasets and budgets --------------------------------------------------------------------


@router.get("/datasets", response_class=HTMLResponse)
def datasets_page(request: Request, ui: AdminUi, session: SessionDep) -> Response:
    rows = budget_service.overview(session, tenant_id=ui.principal.tenant_id)
    return _page(
        request,
        "datasets.html",
        ui,
        rows=[
            {
                "dataset": DatasetPublic.from_row(row.dataset),
                "budget": row.budget,
                "spend": row.spend,
                "remaining": row.remaining,
            }
            for row in rows
        ],
        builtin_tasks=sorted(BUILTIN_TASKS),
    )


@router.post("/datasets/upload", response_class=HTMLResponse)
async def upload(
    request: Request, ui: AdminUi, session: SessionDep, settings: SettingsDep
) -> Response:
    form = await _checked_form(request, ui, max_files=1, max_fields=12)
    try:
        upload_file = form.get("file")
        if not isinstance(upload_file, UploadFile) or not upload_file.filename:
            raise InvalidError("file: choose a CSV, TSV or JSONL file to upload")
        fields: dict[str, Any] = {
            name: _text(form, name)
            for name in ("name", "task", "text_column", "label_column", "format")
            if _text(form, name) is not None
        }
        if _text(form, "task") == "custom":
            fields["task"] = _text(form, "task_spec")
        fields["public"] = form.get("public") == "on"
        try:
            meta = DatasetUploadForm.model_validate(fields)
        except ValidationError as err:
            raise InvalidError(
                describe_request_errors(err.errors(include_input=False))[0]
            ) from None
        dataset = await run_in_threadpool(
            store_file_upload, session, settings, ui.principal.tenant_id, meta, upload_file
        )
    finally:
        await form.close()
    return _see_other(f"/ui/datasets/{dataset.id}")


def _job_fields() -> list[dict[str, Any]]:
    """The job form's method parameters, from the registry: each with the methods that take
    it (a method added to the registry appears here with its own parameters)."""
    out = []
    for name, field in param_fields().items():
        out.append(
            {
                "name": name,
                "methods": sorted(field.descriptions),
                "description": field.description(),
            }
        )
    return out


@router.get("/datasets/{dataset_id}", response_class=HTMLResponse)
def dataset_page(request: Request, dataset_id: str, ui: AdminUi, session: SessionDep) -> Response:
    tenant = ui.principal.tenant_id
    dataset = dataset_service.get_dataset(session, tenant, dataset_id)
    budget = points = None
    if dataset.kind == DatasetKind.PRIVATE:
        try:
            view, timeline = budget_service.spend_timeline(
                session, tenant_id=tenant, dataset_id=dataset_id
            )
        except NotFoundError:  # no budget yet: the page offers to set one
            pass
        else:
            budget = BudgetPublic.from_view(view)
            points = [
                ChartPoint(
                    at=p.entry.created_at,
                    kind=p.entry.kind,
                    job_id=p.entry.job_id,
                    job_epsilon=p.entry.epsilon,
                    composed=p.epsilon,
                    plain_sum=p.plain_sum,
                )
                for p in timeline
            ]
    publics = [
        DatasetPublic.from_row(d)
        for d in dataset_service.list_datasets(
            session, tenant, include_deleted=False, limit=500, offset=0
        )
        if d.kind == DatasetKind.PUBLIC
    ]
    jobs = job_service.list_jobs(session, tenant, dataset_id=dataset_id, limit=50)
    return _page(
        request,
        "dataset.html",
        ui,
        dataset=DatasetPublic.from_row(dataset),
        budget=budget,
        points=points,
        chart=spend_chart(points, budget.epsilon) if budget is not None and points else None,
        jobs=[JobPublic.from_row(j) for j in jobs],
        publics=publics,
        methods=[
            {"name": kind.value, "reads_public": method.reads_public}
            for kind, method in METHODS.items()
        ],
        fields=_job_fields(),
        accountings=[a.value for a in Accounting],
        terminal=_terminal(),
    )


@router.post("/datasets/{dataset_id}/budget", response_class=HTMLResponse)
async def set_budget(
    request: Request, dataset_id: str, ui: AdminUi, session: SessionDep
) -> Response:
    form = await _checked_form(request, ui)
    try:
        body = BudgetUpdate.model_validate(
            {
                "epsilon": _number(form, "epsilon", float),
                "delta": _number(form, "delta", float),
                "accounting": _text(form, "accounting") or Accounting.TIGHT.value,
            }
        )
    except ValidationError as err:
        raise InvalidError(describe_request_errors(err.errors(include_input=False))[0]) from None
    await run_in_threadpool(
        budget_service.set_budget,
        session,
        tenant_id=ui.principal.tenant_id,
        dataset_id=dataset_id,
        epsilon=body.epsilon,
        delta=body.delta,
        accounting=body.accounting,
    )
    return _see_other(f"/ui/datasets/{dataset_id}")


def _number(form: FormData, name: str, kind: type) -> Any:
    text = _text(form, name)
    if text is None:
        return None
    try:
        return TypeAdapter(kind).validate_strings(text)
    except ValidationError:
        raise InvalidError(f"{name}: not a number") from None


# --- jobs ------------------------------------------------------------------------------------


def _job_request(form: FormData) -> JobCreate:
    """The job form as the API's request body (validated by the same schema)."""
    method = _text(form, "method") or ""
    try:
        takes = get_method(method).params.model_fields
    except ValueError:  # JobCreate names the method problem below
        takes = {}
    params: dict[str, Any] = {}
    for name, field in param_fields().items():
        text = _text(form, f"param_{name}")
        if text is None or name not in takes:
            continue
        try:
            params[name] = TypeAdapter(field.annotation).validate_strings(text)
        except ValidationError as err:
            problem = err.errors(include_input=False)[0]["msg"]
            raise InvalidError(f"params.{name}: {problem}") from None
    body = {
        "dataset_id": _text(form, "dataset_id"),
        "method": method,
        "public_dataset_id": _text(form, "public_dataset_id"),
        "epsilon": _number(form, "epsilon", float),
        "delta": _number(form, "delta", float),
        "accounting": _text(form, "accounting"),  # missing: the budget's
        "shots": _number(form, "shots", int) or DEFAULT_SHOTS,
        "params": params or None,
    }
    try:
        return JobCreate.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as err:
        raise InvalidError(describe_request_errors(err.errors(include_input=False))[0]) from None


@router.post("/jobs/quote")
async def quote(request: Request, ui: AdminUi, session: SessionDep) -> Response:
    """What the job in the form would cost, from the planner (nothing is reserved)."""
    asked = _job_request(await _checked_form(request, ui)).to_request()
    result = await run_in_threadpool(
        lambda: job_service.quote_job(
            session,
            asked,
            tenant_id=ui.principal.tenant_id,
            backend=request.app.state.backend_provider.kind,  # promptdpsgd: not on vLLM
        )
    )
    return JSONResponse(
        {
            "epsilon": result.epsilon,
            "delta": result.delta,
            "budget": result.budget_epsilon,
            "spent": result.spend_now.epsilon,
            "spent_after": result.spend_after.epsilon,
            "plain_sum_after": result.spend_after.plain_sum,
            "fits": result.fits,
        }
    )


@router.post("/jobs", response_class=HTMLResponse)
async def submit(request: Request, ui: AdminUi, session: SessionDep, queue: QueueDep) -> Response:
    asked = _job_request(await _checked_form(request, ui)).to_request()
    job = await run_in_threadpool(
        lambda: job_service.submit_job(
            session,
            queue,
            asked,
            tenant_id=ui.principal.tenant_id,
            backend=request.app.state.backend_provider.kind,  # promptdpsgd: not on vLLM
        )
    )
    return _see_other(f"/ui/jobs/{job.id}")


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, ui: AdminUi, session: SessionDep) -> Response:
    tenant = ui.principal.tenant_id
    names = {
        d.id: d.name
        for d in dataset_service.list_datasets(
            session, tenant, include_deleted=True, limit=1000, offset=0
        )
    }
    jobs = [JobPublic.from_row(j) for j in job_service.list_jobs(session, tenant, limit=200)]
    return _page(request, "jobs.html", ui, jobs=jobs, names=names, terminal=_terminal())


def _terminal() -> list[str]:
    return sorted(str(s) for s in TERMINAL_STATUSES)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str, ui: AdminUi, session: SessionDep) -> Response:
    tenant = ui.principal.tenant_id
    job = JobPublic.from_row(job_service.get_job(session, tenant, job_id))
    dataset = dataset_service.get_dataset(session, tenant, job.dataset_id)
    return _page(request, "job.html", ui, job=job, dataset_name=dataset.name, terminal=_terminal())


@router.get("/jobs/{job_id}/status")
def job_status(job_id: str, ui: AdminUi, session: SessionDep) -> JSONResponse:
    """The job's live state, polled by the page."""
    job = JobPublic.from_row(job_service.get_job(session, ui.principal.tenant_id, job_id))
    return JSONResponse(
        {
            "id": job.id,
            "status": job.status,
            "done": job.progress.done,
            "total": job.progress.total,
            "error": job.error,
            "prompt_id": job.prompt_id,
            "cancel_requested": job.cancel_requested,
            "terminal": job.status in TERMINAL_STATUSES,
            "finished": f"{job.finished_at:%Y-%m-%d %H:%M:%S} UTC" if job.finished_at else None,
        }
    )


@router.post("/jobs/{job_id}/cancel", response_class=HTMLResponse)
async def cancel(request: Request, job_id: str, ui: AdminUi, session: SessionDep) -> Response:
    await _checked_form(request, ui)
    await run_in_threadpool(job_service.cancel_job, session, ui.principal.tenant_id, job_id)
    return _see_other(f"/ui/jobs/{job_id}")


# --- prompts ---------------------------------------------------------------------------------


@router.get("/prompts", response_class=HTMLResponse)
def prompts_page(request: Request, ui: AnyUi, session: SessionDep) -> Response:
    rows = prompt_service.list_prompt_sets(session, ui.principal.tenant_id, limit=200)
    return _page(request, "prompts.html", ui, prompts=[PromptSummary.from_row(r) for r in rows])


@router.get("/prompts/{prompt_id}", response_class=HTMLResponse)
def prompt_page(request: Request, prompt_id: str, ui: AnyUi, session: SessionDep) -> Response:
    row = prompt_service.get_prompt_set(session, ui.principal.tenant_id, prompt_id)
    return _page(request, "prompt.html", ui, prompt=PromptPublic.from_row(row), answer=None)


@router.get("/prompts/{prompt_id}/soft-prompt")
def download_soft_prompt(prompt_id: str, ui: AnyUi, session: SessionDep) -> Response:
    """The soft prompt's safetensors file, as ``GET /v1/prompts/{id}/soft-prompt`` serves
    it (same tenant check, same hash check), for a signed-in browser."""
    file = prompt_service.get_soft_prompt_file(session, ui.principal.tenant_id, prompt_id)
    return Response(
        content=file.data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{file.filename}"',
            "X-Content-SHA256": file.sha256,
        },
    )


@router.post("/prompts/{prompt_id}/complete", response_class=HTMLResponse)
async def complete(
    request: Request, prompt_id: str, ui: AnyUi, session: SessionDep, provider: ProviderDep
) -> Response:
    """Answer a query with the prompt, as ``POST /v1/prompts/{id}/complete``. The query is
    used for one backend call; it is not stored, logged or put back into the page."""
    form = await _checked_form(request, ui)
    query = _text(form, "query")
    if query is None or len(query) > 20_000:
        raise InvalidError("query: enter a query of 1 to 20000 characters")
    row = await run_in_threadpool(
        prompt_service.get_prompt_set, session, ui.principal.tenant_id, prompt_id
    )
    prompt, source = PromptPublic.from_row(row), prompt_service.PromptSource.from_row(row)
    await run_in_threadpool(session.rollback)
    limiter = _limiter(request)  # a model call: a stricter limit than the key's pages
    await limiter.charge(limiter.model_calls, ui.principal.key_id)
    result = await run_in_threadpool(prompt_service.complete, source, query, provider)
    answer = {
        "kind": result.kind.value,
        "label": result.label,
        "scores": result.scores,
        "value": result.value,
    }
    if _wants_json(request):
        return JSONResponse(answer)
    return _page(request, "prompt.html", ui, prompt=prompt, answer=answer)
