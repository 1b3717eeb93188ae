"""The dashboard's page handlers: each reads its session (:mod:`.session`), parses its form
(:mod:`.forms`), calls the services and renders a template (:mod:`app.ui.render`).

Every query is scoped to the session key's tenant (another tenant's IDs are 404, as in the
API; an org:read sign-in has the fleet page of :mod:`.fleet` only) and every page renders
the API's own public schemas, so the dashboard shows exactly what
the API would: metadata and DP outputs, never a private record.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session

from app.api.deps import AdviceDep, ProviderDep, QueueDep, SessionDep, SettingsDep
from app.api.engine_gate import engine_gate
from app.api.errors import describe_request_errors
from app.api.limits import RateLimitedError, client_address
from app.api.responses import FiniteJSONResponse
from app.api.routes.ui import budget_views, fleet, forms
from app.api.routes.ui.session import (
    LANDING,
    AdminUi,
    AnyUi,
    CurrentUi,
    LimiterDep,
    ReadSessionsDep,
    SessionsDep,
    SignedInUi,
    SignerDep,
    SignInRequiredError,
    check_key,
    checked_form,
    end_session,
    login_form,
    login_token_ok,
    safe_next,
    start_session,
)
from app.api.schemas import (
    AdvicePublic,
    BudgetPublic,
    DatasetPublic,
    JobPublic,
    PromptPublic,
    PromptSummary,
    RecordReadPublic,
)
from app.api.uploads import store_file_upload
from app.db.models import TERMINAL_STATUSES, DatasetKind, PromptSet
from app.privacy.budget import spend_text
from app.services import advice as advice_service
from app.services import budgets as budget_service
from app.services import datasets as dataset_service
from app.services import jobs as job_service
from app.services import prompts as prompt_service
from app.services import record_reads
from app.services import tenants as tenant_service
from app.services.errors import NotFoundError, ServiceError
from app.services.rows import asked_epsilon
from app.synthesis.tasks import BUILTIN_TASKS
from app.ui import job_list
from app.ui.charts import ChartPoint, spend_chart
from app.ui.render import error_page, page, see_other, wants_json
from app.ui.session import SESSION_COOKIE, forget_cookie


class UiRoute(APIRoute):
    """Dashboard routes answer errors as pages (or JSON for the page's own fetches), and an
    unknown or expired session with the sign-in page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequiredError:
                return _sign_in_again(request)
            except ServiceError as exc:
                return error_page(request, exc.status, exc.message)
            except RateLimitedError as exc:
                response = error_page(request, 429, exc.message)
                response.headers["Retry-After"] = str(exc.retry_after_s)
                return response
            except RequestValidationError as exc:
                return error_page(request, 422, describe_request_errors(list(exc.errors()))[0])

        return handle


def _sign_in_again(request: Request) -> Response:
    """A page load goes to the sign-in page, which comes back to it once signed in (its path
    as ``next``); a form post or a script gets a 401."""
    if request.method == "GET" and not wants_json(request):
        response: Response = RedirectResponse(_login_url(request), status_code=303)
    else:
        response = error_page(request, 401, "not signed in, or the session ended")
    if SESSION_COOKIE in request.cookies:  # ended or forged: forget it
        forget_cookie(response, SESSION_COOKIE)
    return response


def _login_url(request: Request) -> str:
    """The sign-in page, with the page asked for as ``next`` (none for the home page)."""
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if path == LANDING or safe_next(path) is None:
        return "/ui/login"
    return f"/ui/login?{urlencode({'next': path})}"


router = APIRouter(prefix="/ui", include_in_schema=False, route_class=UiRoute)


def _terminal() -> list[str]:
    return sorted(str(s) for s in TERMINAL_STATUSES)


# --- signing in and out ----------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
async def home(ui: CurrentUi) -> Response:
    """Where a sign-in lands: an admin on its datasets, an org:read key on the fleet page,
    a prompts:read key on its prompts."""
    if ui.is_org:
        return see_other("/ui/fleet")
    return see_other("/ui/datasets" if ui.is_admin else "/ui/prompts")


fleet.register(router)  # /ui/fleet (org:read sign-ins) and /ui/keys


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, signer: SignerDep, next: str | None = None) -> Response:
    """The sign-in form; ``next`` (a dashboard page, see ``safe_next``) is where it lands."""
    return login_form(request, signer, next_path=next)


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request,
    settings: SettingsDep,
    signer: SignerDep,
    limiter: LimiterDep,
    sessions: SessionsDep,
    read_sessions: ReadSessionsDep,
) -> Response:
    """Exchange a key for a session. Failed sign-ins are throttled per client address: past
    ``DPSYN_SIGNIN_FAILURES_PER_MINUTE`` the form answers 429 before any key is looked up."""
    form = await request.form()
    next_path = safe_next(forms.field(form, "next"))
    if not login_token_ok(request, signer, forms.field(form, "csrf")):
        expired = "The sign-in form expired: please try again."
        return login_form(request, signer, expired, 403, next_path)
    raw_key = forms.text(form, "api_key")
    if raw_key is None:
        return login_form(request, signer, "Enter an API key.", 422, next_path)
    try:
        key_id = await check_key(limiter, client_address(request.scope), read_sessions, raw_key)
    except RateLimitedError as exc:
        refused = login_form(request, signer, exc.message, 429, next_path)
        refused.headers["Retry-After"] = str(exc.retry_after_s)
        return refused
    if key_id is None:
        return login_form(request, signer, "Invalid or revoked API key.", 401, next_path)
    ttl_s = settings.ui_session_ttl_s
    return await start_session(request, signer, sessions, key_id, ttl_s, next_path)


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request, ui: SignedInUi, sessions: SessionsDep) -> Response:
    """End the session on the server (a copy of the cookie opens nothing afterwards). Not
    charged to the key's rate limit: signing out must work when the key is over it."""
    await checked_form(request, ui)
    return await end_session(sessions, ui)


# --- datasets and budgets --------------------------------------------------------------------


@router.get("/datasets", response_class=HTMLResponse)
def datasets_page(request: Request, ui: AdminUi, session: SessionDep) -> Response:
    """The datasets table, sorted and filtered by the query string (``sort``, ``order``,
    ``kind``, ``level``, ``q``; an unknown value is a 422)."""
    table = budget_views.datasets_table(session, ui.principal.tenant_id, request.query_params)
    return page(
        request,
        "datasets.html",
        ui,
        table=table,
        rows=table.rows,
        builtin_tasks=sorted(BUILTIN_TASKS),
    )


@router.post("/datasets/upload", response_class=HTMLResponse)
async def upload(
    request: Request, ui: AdminUi, session: SessionDep, settings: SettingsDep
) -> Response:
    form = await checked_form(request, ui, max_files=1, max_fields=12)
    try:
        meta, upload_file = forms.dataset_upload(form)
        dataset = await run_in_threadpool(
            store_file_upload, session, settings, ui.principal, meta, upload_file
        )
    finally:
        await form.close()
    return see_other(f"/ui/datasets/{dataset.id}")


def _spend(
    session: Session, tenant: str, dataset_id: str
) -> tuple[BudgetPublic | None, list[ChartPoint] | None]:
    """The private dataset's budget and its ledger as chart points (None: no budget yet)."""
    try:
        view, timeline = budget_service.spend_timeline(
            session, tenant_id=tenant, dataset_id=dataset_id
        )
    except NotFoundError:  # no budget yet: the page offers to set one
        return None, None
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
    return BudgetPublic.from_view(view), points


def _public_datasets(session: Session, tenant: str) -> list[DatasetPublic]:
    """The public datasets a PromptPATE job of this tenant may read."""
    rows = dataset_service.list_datasets(
        session, tenant, include_deleted=False, limit=500, offset=0
    )
    return [DatasetPublic.from_row(d) for d in rows if d.kind == DatasetKind.PUBLIC]


@router.get("/datasets/{dataset_id}", response_class=HTMLResponse)
def dataset_page(request: Request, dataset_id: str, ui: AdminUi, session: SessionDep) -> Response:
    tenant = ui.principal.tenant_id
    dataset = dataset_service.get_dataset(session, tenant, dataset_id)
    budget, points = None, None
    if dataset.kind == DatasetKind.PRIVATE:
        budget, points = _spend(session, tenant, dataset_id)
    jobs = job_service.list_jobs(session, tenant, dataset_id=dataset_id, limit=50)
    public = DatasetPublic.from_row(dataset)
    return page(
        request,
        "dataset.html",
        ui,
        dataset=public,
        budget=budget,
        groups=budget_views.label_rows(budget, public.label_counts) if budget else [],
        binding=budget_views.binding_name(budget) if budget else None,
        points=points,
        chart=spend_chart(points, budget.epsilon) if budget is not None and points else None,
        jobs=JobPublic.from_rows(jobs, job_service.job_charges(session, jobs)),
        reads=[
            RecordReadPublic.from_row(r)
            for r in record_reads.list_reads(session, dataset_id, limit=50, offset=0)
        ],
        publics=_public_datasets(session, tenant),
        terminal=_terminal(),
        default_delta=budget_service.default_delta(),
        **forms.job_form_options(labels=len(public.task.get("labels") or [])),
    )


@router.post("/datasets/{dataset_id}/budget", response_class=HTMLResponse)
async def set_budget(
    request: Request, dataset_id: str, ui: AdminUi, session: SessionDep
) -> Response:
    body = forms.budget_update(await checked_form(request, ui))
    await run_in_threadpool(
        budget_service.set_budget,
        session,
        tenant_id=ui.principal.tenant_id,
        dataset_id=dataset_id,
        epsilon=body.epsilon,
        delta=body.delta,
        accounting=body.accounting,
        warn_threshold=body.warn_threshold,
    )
    return see_other(f"/ui/datasets/{dataset_id}")


@router.post("/datasets/{dataset_id}/counts-public", response_class=HTMLResponse)
async def set_counts_public(
    request: Request, dataset_id: str, ui: AdminUi, session: SessionDep
) -> Response:
    """Declare the dataset's label counts public, or withdraw it (as ``PUT
    /v1/datasets/{id}/counts-public``), recorded with the signed-in key."""
    public = forms.counts_public(await checked_form(request, ui))
    await run_in_threadpool(
        dataset_service.set_counts_public,
        session,
        ui.principal.tenant_id,
        dataset_id,
        public=public,
        key_id=ui.principal.key_id,
    )
    return see_other(f"/ui/datasets/{dataset_id}")


@router.get("/datasets/{dataset_id}/ledger.csv")
def ledger_csv(dataset_id: str, ui: AdminUi, session: SessionDep) -> Response:
    """The dataset's ledger as CSV (as ``GET /v1/datasets/{id}/budget/ledger.csv``)."""
    filename, text = budget_service.ledger_export(
        session, tenant_id=ui.principal.tenant_id, dataset_id=dataset_id
    )
    return Response(
        content=text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


# --- jobs ------------------------------------------------------------------------------------


@router.post("/jobs/quote")
async def quote(
    request: Request, ui: AdminUi, session: SessionDep, provider: ProviderDep
) -> Response:
    """What the job in the form would cost, from the planner (nothing is reserved)."""
    asked = forms.job_request(await checked_form(request, ui))
    result = await run_in_threadpool(
        lambda: job_service.quote_job(
            session,
            asked,
            tenant_id=ui.principal.tenant_id,
            backend=provider.kind,  # promptdpsgd: not on vLLM
        )
    )
    groups = await run_in_threadpool(
        budget_views.quote_groups, session, ui.principal.tenant_id, asked.dataset_id, result
    )
    return FiniteJSONResponse(
        {
            "epsilon": result.epsilon,
            "delta": result.delta,
            "budget": result.budget_epsilon,
            "spent": result.spend_now.epsilon,
            "spent_after": result.spend_after.epsilon,
            "plain_sum_after": result.spend_after.plain_sum,
            "fits": result.fits,
            "groups": groups,
            "noise": dict(result.noise),
            "counts_epsilon": result.spend_now.counts_epsilon,
            "text": budget_views.quote_texts(result, groups),
        }
    )


@router.post("/jobs", response_class=HTMLResponse)
async def submit(
    request: Request, ui: AdminUi, session: SessionDep, queue: QueueDep, provider: ProviderDep
) -> Response:
    asked = forms.job_request(await checked_form(request, ui))
    job = await run_in_threadpool(
        lambda: job_service.submit_job(
            session,
            queue,
            asked,
            tenant_id=ui.principal.tenant_id,
            backend=provider.kind,  # promptdpsgd: not on vLLM
            submitted_by=ui.principal.key_id,  # the signed-in key
        )
    )
    return see_other(f"/ui/jobs/{job.id}")


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, ui: AdminUi, session: SessionDep) -> Response:
    """The tenant's jobs, filtered by status and dataset and sorted by a column (the query
    string of :mod:`app.ui.tables`: ``status``, ``dataset``, ``sort``, ``order``; an unknown
    value is a 422)."""
    tenant = ui.principal.tenant_id
    datasets = dataset_service.list_datasets(
        session, tenant, include_deleted=True, limit=1000, offset=0
    )
    names = {d.id: d.name for d in datasets}
    private = [d for d in datasets if d.kind == DatasetKind.PRIVATE]
    spec = job_list.jobs_table([d.id for d in private])
    status, dataset_id = job_list.query_filters(spec, request.query_params)
    rows = job_service.list_jobs(
        session, tenant, status=status, dataset_id=dataset_id, limit=job_list.MAX_ROWS
    )
    view = spec.apply(
        JobPublic.from_rows(rows, job_service.job_charges(session, rows)), request.query_params
    )
    return page(
        request,
        "jobs.html",
        ui,
        jobs_view=view,
        jobs=view.rows,
        names=names,
        filter_datasets=private,
        terminal=_terminal(),
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str, ui: AdminUi, session: SessionDep) -> Response:
    """A job: its parameters, asked, planned and charged epsilon and why, its timings, its
    dataset (and public dataset, validation set) by name, the key that submitted it (by name,
    if it has one), and a link to its prompt."""
    tenant = ui.principal.tenant_id
    row = job_service.get_job(session, tenant, job_id)
    job = JobPublic.from_rows([row], job_service.job_charges(session, [row]))[0]
    ids = [job.dataset_id, job.public_dataset_id, job.validation_dataset_id]
    names = job_service.dataset_names(session, tenant, [i for i in ids if i])
    keys = {key.id: key.name for key in tenant_service.list_keys(session, tenant)}
    return page(
        request,
        "job.html",
        ui,
        job=job,
        dataset_name=names.get(job.dataset_id, job.dataset_id),
        public_name=names.get(job.public_dataset_id or "", job.public_dataset_id),
        validation_name=names.get(job.validation_dataset_id or "", job.validation_dataset_id),
        submitter_name=keys.get(job.submitted_by or ""),
        asked=asked_epsilon(row.config or {}),
        duration=job_list.duration_text(job.duration_s),
        when=job_list.when_text,
        terminal=_terminal(),
    )


@router.get("/jobs/{job_id}/status")
def job_status(job_id: str, ui: AdminUi, session: SessionDep) -> JSONResponse:
    """The job's live state, polled by the page (and by the jobs table's rows)."""
    row = job_service.get_job(session, ui.principal.tenant_id, job_id)
    job = JobPublic.from_rows([row], job_service.job_charges(session, [row]))[0]
    return FiniteJSONResponse(
        {
            "id": job.id,
            "status": job.status,
            "done": job.progress.done,
            "total": job.progress.total,
            "progress_text": job.progress_text,
            "charge": job.charge,
            "charged_epsilon": job.charged_epsilon,
            "charged_text": spend_text(job.charged_epsilon),  # as the page printed it
            "charge_note": job.charge_note,
            "started": job_list.when_text(job.started_at),
            "duration": job_list.duration_text(job.duration_s),
            "error": job.error,
            "prompt_id": job.prompt_id,
            "cancel_requested": job.cancel_requested,
            "terminal": job.status in TERMINAL_STATUSES,
            "finished": f"{job.finished_at:%Y-%m-%d %H:%M:%S} UTC" if job.finished_at else None,
        }
    )


@router.post("/jobs/{job_id}/cancel", response_class=HTMLResponse)
async def cancel(request: Request, job_id: str, ui: AdminUi, session: SessionDep) -> Response:
    await checked_form(request, ui)
    await run_in_threadpool(job_service.cancel_job, session, ui.principal.tenant_id, job_id)
    return see_other(f"/ui/jobs/{job_id}")


# --- prompts ---------------------------------------------------------------------------------


@router.get("/prompts", response_class=HTMLResponse)
def prompts_page(
    request: Request, ui: AnyUi, session: SessionDep, sort: str = "created"
) -> Response:
    """The tenant's newest prompts; ``sort=validation`` puts the best validation score first
    (unscored last)."""
    tenant = ui.principal.tenant_id
    rows = prompt_service.list_prompt_sets(session, tenant, limit=200)
    names = job_service.dataset_names(session, tenant, [r.dataset_id for r in rows])
    prompts = [PromptSummary.from_row(r, names.get(r.dataset_id)) for r in rows]
    if sort == "validation":
        prompts.sort(
            key=lambda p: -(p.validation_accuracy if p.validation_accuracy is not None else -1.0)
        )
    return page(request, "prompts.html", ui, prompts=prompts)


def _prompt_view(session: Session, tenant: str, row: PromptSet) -> dict[str, Any]:
    """The prompt page's context: the prompt with its dataset's name (the page shows it
    beside the method) and its notes (as ``GET /v1/prompts/{id}`` has them), and the name of
    its validation set, so that the page names the set rather than print its ID."""
    validation = str((row.validation or {}).get("dataset_id") or "")
    ids = [row.dataset_id, validation] if validation else [row.dataset_id]
    names = job_service.dataset_names(session, tenant, ids)
    notes = prompt_service.prompt_notes(session, row)
    count = prompt_service.demonstration_count(session, row)
    prompt = PromptPublic.from_row(row, names.get(row.dataset_id), notes, count)
    return {"prompt": prompt, "validation_name": names.get(validation)}


@router.get("/prompts/{prompt_id}", response_class=HTMLResponse)
def prompt_page(request: Request, prompt_id: str, ui: AnyUi, session: SessionDep) -> Response:
    row = prompt_service.get_prompt_set(session, ui.principal.tenant_id, prompt_id)
    view = _prompt_view(session, ui.principal.tenant_id, row)
    return page(request, "prompt.html", ui, **view, answer=None)


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
    request: Request,
    prompt_id: str,
    ui: AnyUi,
    session: SessionDep,
    provider: ProviderDep,
    limiter: LimiterDep,
) -> Response:
    """Answer a query with the prompt, as ``POST /v1/prompts/{id}/complete``. The query is
    used for one backend call; it is not stored, logged or put back into the page."""
    form = await checked_form(request, ui)
    query, calibrated = forms.completion_query(form), form.get("calibrated") == "on"
    row = await run_in_threadpool(
        prompt_service.get_prompt_set, session, ui.principal.tenant_id, prompt_id
    )
    view = await run_in_threadpool(_prompt_view, session, ui.principal.tenant_id, row)
    source = prompt_service.PromptSource.from_row(row)
    await run_in_threadpool(session.rollback)
    # A model call: a stricter limit than the key's pages.
    await limiter.charge(limiter.model_calls, ui.principal.key_id)
    principal = ui.principal
    async with engine_gate(request).hold(principal.key_id, principal.tenant_id) as slot:
        await slot.gate.enter(slot)
        result = await run_in_threadpool(
            functools.partial(prompt_service.complete, calibrated=calibrated),
            source,
            query,
            provider,
        )
    answer = {
        "kind": result.kind.value,
        "label": result.label,
        "scores": result.scores,
        "calibration": result.calibration,
        "value": result.value,
    }
    if wants_json(request):
        return FiniteJSONResponse(answer)
    return page(request, "prompt.html", ui, **view, answer=answer)


# --- advice before spending -------------------------------------------------------


@router.get("/advice", response_class=HTMLResponse)
def advice_page(request: Request, ui: AdminUi, session: SessionDep) -> Response:
    """The tenant's advice runs, and the form that starts one on a public labelled dataset."""
    tenant = ui.principal.tenant_id
    datasets = dataset_service.list_datasets(
        session, tenant, include_deleted=True, limit=1000, offset=0
    )
    labelled = [
        d for d in datasets if d.kind == DatasetKind.PUBLIC and d.label_counts and not d.deleted_at
    ]
    runs = [AdvicePublic.model_validate(r) for r in advice_service.list_runs(session, tenant)]
    names = {d.id: d.name for d in datasets}
    return page(request, "advice.html", ui, runs=runs, datasets=labelled, names=names)


@router.post("/advice", response_class=HTMLResponse)
async def start_advice(
    request: Request, ui: AdminUi, sessions: SessionsDep, runner: AdviceDep, settings: SettingsDep
) -> Response:
    form = await checked_form(request, ui, max_fields=12)
    body = forms.advice_request(form)
    cap = settings.advice_per_tenant

    def create() -> str:
        with sessions() as session:
            row = advice_service.create(session, ui.principal.tenant_id, body.dataset_id,
                                        body.to_config(), cap=cap)  # fmt: skip
            session.commit()
            return row.id

    advice_id = await run_in_threadpool(create)
    runner.submit(advice_id)
    return see_other(f"/ui/advice/{advice_id}")


@router.get("/advice/{advice_id}", response_class=HTMLResponse)
def advice_run_page(request: Request, advice_id: str, ui: AdminUi, session: SessionDep) -> Response:
    """One advice run: progress while it runs, then the table beside the baselines and the
    recommendation."""
    tenant = ui.principal.tenant_id
    run = AdvicePublic.model_validate(advice_service.get(session, tenant, advice_id))
    names = job_service.dataset_names(session, tenant, [run.dataset_id])
    return page(request, "advice_run.html", ui, run=run, dataset_name=names.get(run.dataset_id))
