"""The HTTP service: ``create_app`` builds the FastAPI application.

Singletons are built once here and kept on ``app.state``: settings, the session factory, the
job queue, the backend provider (the model loads on first use) and the metrics registry.
At start-up the database is migrated (Alembic is the only way the schema changes; not when
``DPSYN_MIGRATE_ON_START=false``, for replicas behind a one-shot ``dpsyn migrate``) and, if
``DPSYN_BOOTSTRAP_API_KEY`` is set, it becomes an admin key of the tenant "default". The
ledger's hash chains are verified and compared with their exported heads
(:func:`app.ledger.heads.check_at_start`): a dataset whose database is behind them is held.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import sessionmaker

from app.api.deps import bearer_tenant, renew_keys_forever
from app.api.engine_gate import EngineGate, EngineLimits
from app.api.errors import install_error_handlers
from app.api.limits import install_limits
from app.api.openai_errors import install_openai_errors
from app.api.openapi import declare_errors, install_openapi
from app.api.overload import install_overload_protection
from app.api.planning_lane import install_planning_lane
from app.api.prompt_reads import install_prompt_fast_path
from app.api.request_checks import install_request_checks
from app.api.routes import advice, budgets, datasets, health, jobs, keys, openai, prompts, ui
from app.api.routes.prompts import preload_prompts
from app.api.routes.ui.session import session_tenant
from app.db import record_keys
from app.db.migrate import upgrade
from app.db.session import PoolLimits, get_engine
from app.ledger.heads import check_at_start
from app.llm.provider import BackendProvider, provider_for
from app.log_redaction import install_log_redaction
from app.methods.registry import import_method_modules
from app.services.advice import AdviceRunner, fail_interrupted
from app.services.metrics import make_registry
from app.services.queue import JobQueue, load_runtime
from app.services.tenants import ensure_bootstrap_key
from app.settings import Settings, get_settings
from app.ui.web import install_dashboard

DESCRIPTION = """Differentially private prompt synthesis (AdaDPSyn, DP few-shot generation).

Upload a private dataset, give it a privacy budget, submit synthesis jobs against it and use
the synthesised prompts. Authenticate with `Authorization: Bearer <key>`.
"""


async def _planning_tenant(request: Request) -> str | Response | None:
    """Whose share of the planning lane a request takes: its bearer key's tenant, else its
    dashboard session's (``app.api.planning_lane``)."""
    tenant = await bearer_tenant(request)
    return tenant if tenant is not None else await session_tenant(request)


def _startup(settings: Settings, sessions: sessionmaker) -> None:
    if settings.migrate_on_start:  # off on replicas behind a one-shot `dpsyn migrate`
        upgrade(settings.database_url)
    with sessions() as session:  # runs whose runner died (lease run out), failed once
        fail_interrupted(session)
        session.commit()
    with sessions() as session:  # a hand-edited ledger, a database behind its exported heads
        check_at_start(session, settings.database_url)
        session.commit()
    if settings.bootstrap_api_key:
        with sessions() as session:
            ensure_bootstrap_key(session, settings.bootstrap_api_key)
            session.commit()


def create_app(
    settings: Settings | None = None,
    *,
    queue: JobQueue | None = None,
    backend_provider: BackendProvider | None = None,
) -> FastAPI:
    """The application.

    ``backend_provider`` defaults to one built from the settings; ``queue`` to
    the runtime's ``make_queue(settings, provider)`` (``DPSYN_RUNTIME``, default
    ``workers.runtime``: :func:`app.services.queue.load_runtime`), which shares that provider (an
    in-process worker then uses the same model as ``/complete``). The queue's lifecycle is
    its maker's: ``make_queue`` returns it started (so the schema is migrated before it is
    made), with the outbox's dispatcher running, which sends the task of a job left queued
    again (``DPSYN_REDISPATCH_AFTER_S``), and whoever runs the app closes it. A queue passed
    in is used as it is (tests pass their own: no dispatcher then).
    """
    # First: an in-process queue made below may start recovered jobs at once.
    install_log_redaction()
    settings = settings or get_settings()
    import_method_modules(settings.method_module_names())  # plug-ins, before the schema
    record_keys.configure_from(settings)  # the records' data keys, before migrations
    provider = backend_provider or provider_for(settings)
    if queue is None:
        if settings.migrate_on_start:  # an in-process queue reads unfinished jobs at once
            upgrade(settings.database_url)
        queue = load_runtime(settings).make_queue(settings, provider)
    # The API's pools are sized by the settings (one connection per request thread, a short
    # checkout timeout); scripts and workers keep the default engines.
    pool = PoolLimits(
        size=settings.db_pool_size or 1, overflow=0, timeout_s=settings.db_pool_timeout_s
    )
    sessions = sessionmaker(
        bind=get_engine(settings.database_url, pool=pool), expire_on_commit=False
    )

    advice_runner = AdviceRunner(sessions, provider)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(_startup, settings, sessions)
        if settings.api_runs_advice():
            advice_runner.start()
        background = [
            asyncio.create_task(renew_keys_forever(app)),
            asyncio.create_task(preload_prompts(app, settings.prompt_preload)),
        ]
        yield
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await run_in_threadpool(advice_runner.stop)

    app = FastAPI(title="dpsyn", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.sessions = sessions
    app.state.read_sessions = sessionmaker(
        bind=get_engine(settings.database_url, readonly=True, pool=pool), expire_on_commit=False
    )
    app.state.queue = queue
    app.state.backend_provider = provider
    app.state.advice = advice_runner
    app.state.engine_gate = EngineGate(EngineLimits.of(settings))
    app.state.metrics = make_registry(sessions, per_dataset=settings.metrics_token is not None)
    install_error_handlers(app)
    install_prompt_fast_path(app)  # the first middleware added: it runs last, before routing
    # The last middleware added runs first: a request is checked (path, rate, body size)
    # before it may take one of the admission slots.
    install_overload_protection(app, settings)
    install_planning_lane(app, settings, _planning_tenant)  # in front of the gate
    install_limits(app, settings)
    install_request_checks(app, settings)
    for module in (datasets, budgets, jobs, prompts, keys, advice, openai, health):
        declare_errors(module.router)
        app.include_router(module.router)
    install_openai_errors(app, openai.router)  # OpenAI's statuses on its routes, the /v1 hint
    app.include_router(ui.router)  # the web dashboard (docs/dashboard.md), not in the schema
    install_dashboard(app, settings)
    install_openapi(app)
    return app
