"""``dpsyn serve`` (the API, with an in-process worker unless a broker is set) and
``dpsyn worker`` (a Celery worker of the distributed deployment).

With no configuration ``dpsyn serve`` is the embedded deployment: SQLite in ``./.dpsyn/``,
jobs in a background thread of the server process, the packaged CPU model. In development,
without ``DPSYN_BOOTSTRAP_API_KEY``, it creates an admin API key once, prints it, and saves it
to ``./.dpsyn/admin_key`` (mode 0600), where the ``dpsyn`` client commands find it. Unless
``DPSYN_UI_SECRET`` is set, the key that signs the dashboard's sessions is kept beside it
(``ui_secret``), so sign-ins survive a restart; in production, where several replicas must
share one key, ``DPSYN_UI_SECRET`` is required instead. The key of the private records'
fingerprints (``DPSYN_FINGERPRINT_KEY``, docs/privacy.md "Budgets follow the records") is kept
the same way (``fingerprint_key``) and required in production.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path
from typing import Annotated, TypedDict

import typer
from pydantic import SecretStr
from rich.console import Console
from sqlalchemy.engine import make_url

from app import heap
from app.cli.errors import fail
from app.cli.model_options import quiet_progress_bars
from app.llm.factory import BackendKind
from app.settings import Settings
from app.worker_health import DEFAULT_MAX_AGE_S, UnhealthyError
from app.worker_health import check as check_worker_alive

err = Console(stderr=True)
DATA_DIR = Path(".dpsyn")
KEY_FILE = "admin_key"
UI_SECRET_FILE = "ui_secret"  # signs the dashboard's session cookies (docs/dashboard.md)
FINGERPRINT_KEY_FILE = "fingerprint_key"  # keys the records' fingerprints (docs/privacy.md)
CLIENT_URL_FILE = "url"  # read by the client commands (app/cli/config.py)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def make_data_dir(data_dir: Path) -> None:
    """Create the state directory, private, and keep it out of git (it holds a key)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    ignore = data_dir / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# dpsyn serve's state: the database and the admin key\n*\n")


def embedded_database_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'dpsyn.db'}"


def admin_key_path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / KEY_FILE


def load_or_create_admin_key(data_dir: Path) -> tuple[str, bool]:
    """The development admin key saved in ``data_dir``, created (mode 0600) if missing.

    Returns the key and whether it was created now.
    """
    return _load_or_create_secret(admin_key_path(data_dir))


def load_or_create_ui_secret(data_dir: Path) -> str:
    """The dashboard's cookie-signing key saved in ``data_dir`` (mode 0600), so that sign-ins
    survive a restart of ``dpsyn serve``."""
    return _load_or_create_secret(data_dir / UI_SECRET_FILE)[0]


def load_or_create_fingerprint_key(data_dir: Path) -> str:
    """The key of the private records' fingerprints saved in ``data_dir`` (mode 0600), so
    that a re-upload after a restart of ``dpsyn serve`` is still recognised."""
    return _load_or_create_secret(data_dir / FINGERPRINT_KEY_FILE)[0]


def _load_or_create_secret(path: Path) -> tuple[str, bool]:
    from app.services.tenants import new_raw_key

    data_dir = path.parent
    if path.exists():
        key = path.read_text().strip()
        if key:
            return key, False
    make_data_dir(data_dir)
    key = new_raw_key()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key + "\n")
    os.chmod(path, 0o600)  # also when the file existed (empty) with another mode
    return key, True


def write_client_url(data_dir: Path, host: str, port: int) -> Path:
    """Save the URL the client commands reach this server at, beside the admin key, so that
    ``dpsyn serve --port N`` needs no ``--url`` in the same folder (a wildcard bind is
    reached on loopback)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"  # an IPv6 address in a URL
    make_data_dir(data_dir)
    path = data_dir / CLIENT_URL_FILE
    path.write_text(f"http://{shown}:{port}\n")
    return path


def prepare(settings: Settings, *, data_dir: Path, migrate: bool) -> tuple[Settings, str | None]:
    """Migrate the database and make sure an admin key exists; returns the settings to serve
    with and the raw key if it was created now (to print once)."""
    from app.db import record_keys
    from app.db.migrate import upgrade
    from app.db.session import session_scope
    from app.services.tenants import ensure_bootstrap_key

    created = None
    if settings.bootstrap_api_key is None and settings.environment == "development":
        key, is_new = load_or_create_admin_key(data_dir)
        settings = settings.model_copy(update={"bootstrap_api_key": key})
        created = key if is_new else None
    if settings.ui_secret is None:
        try:
            secret = load_or_create_ui_secret(data_dir)
        except OSError as error:  # a read-only folder: sessions then end at restart
            _say(
                f"dpsyn: cannot keep the dashboard's signing key in {data_dir} ({error}); set "
                "DPSYN_UI_SECRET for sign-ins that survive a restart"
            )
        else:
            settings = settings.model_copy(update={"ui_secret": SecretStr(secret)})
    if settings.fingerprint_key is None and settings.environment == "development":
        key = load_or_create_fingerprint_key(data_dir)  # unreadable: no serving without it
        settings = settings.model_copy(update={"fingerprint_key": SecretStr(key)})
    if settings.database_url.startswith("sqlite"):
        database = make_url(settings.database_url).database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
    # The records' data keys (beside an SQLite database: in the data folder), before 0022 runs.
    record_keys.configure_from(settings)
    if migrate:
        upgrade(settings.database_url)
    if settings.bootstrap_api_key:
        with session_scope(settings.database_url) as session:
            ensure_bootstrap_key(session, settings.bootstrap_api_key)
    return settings, created


def check_port(host: str, port: int) -> None:
    """Fail at once, naming ``--port``, when the server could not listen on ``host:port``.

    Uvicorn would report a busy port only after the migrations and its "startup complete",
    as "[Errno 98]". The check binds as uvicorn will (``SO_REUSEADDR``, so a port left in
    TIME_WAIT by a stopped server counts as free) and lets go at once; a server that takes the
    port in between still fails in uvicorn, as before."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as error:
        message = f"cannot listen on {host}:{port}: unknown host ({error}); check --host"
        raise fail(message) from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise fail(
                    f"port {port} on {host} is already in use (another 'dpsyn serve'?): stop "
                    "that server, or pick a free port with --port (DPSYN_PORT)"
                ) from None
            raise fail(
                f"cannot listen on {host}:{port}: {error.strerror or error}; check --host and "
                "--port (DPSYN_HOST, DPSYN_PORT)"
            ) from None


def serve_command(
    host: Annotated[str | None, typer.Option("--host", help="Default: DPSYN_HOST.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Default: DPSYN_PORT.")] = None,
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir",
            help="Embedded state: the SQLite database (unless DPSYN_DATABASE_URL is set) and "
            "the development admin key.",
        ),
    ] = DATA_DIR,
    migrate: Annotated[
        bool | None,
        typer.Option(
            "--migrate/--no-migrate",
            help="Apply database migrations first (default: DPSYN_MIGRATE_ON_START, true). "
            "API replicas behind a one-shot 'dpsyn migrate' use --no-migrate.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the API; jobs run in this process unless DPSYN_BROKER_URL names a broker."""
    import uvicorn

    from app.main import create_app

    try:
        settings = _settings_to_serve(data_dir, host=host, port=port, migrate=migrate)
        check_port(settings.host, settings.port)
        settings, created = prepare(settings, data_dir=data_dir, migrate=settings.migrate_on_start)
    except ValueError as error:  # settings validation, e.g. production with SQLite
        raise fail(str(error).replace("\n", " ")) from None

    mode = (
        f"Celery workers via {make_url(settings.broker_url).render_as_string(hide_password=True)}"
        if settings.broker_url
        else "in-process worker"
    )
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    _say(f"dpsyn: API on http://{settings.host}:{settings.port}, {mode}, database {database}")
    if admin_key_path(data_dir).exists() and "DPSYN_BOOTSTRAP_API_KEY" not in os.environ:
        write_client_url(data_dir, settings.host, settings.port)  # pairs with the saved key
    if created:
        _say(f"dpsyn: admin API key (shown once; saved to {admin_key_path(data_dir)}):")
        typer.echo(created)
    elif settings.bootstrap_api_key and "DPSYN_BOOTSTRAP_API_KEY" not in os.environ:
        _say(f"dpsyn: admin API key in {admin_key_path(data_dir)}")
    elif not settings.bootstrap_api_key:
        _say("dpsyn: no DPSYN_BOOTSTRAP_API_KEY: no admin key was created")

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    quiet_progress_bars()  # the in-process worker loads the model into this process
    app = create_app(settings)
    heap.enable()  # the app and its imports live as long as the process
    try:
        uvicorn.run(
            app, host=settings.host, port=settings.port, log_level="info", **_proxies(settings)
        )
    finally:
        close = getattr(getattr(app.state, "queue", None), "close", None)
        if callable(close):
            close()


def _settings_to_serve(
    data_dir: Path, *, host: str | None, port: int | None, migrate: bool | None
) -> Settings:
    """The settings with the command's options, checked for serving, and the plug-in methods
    loaded: a ValueError naming what is wrong before anything is migrated, written or bound."""
    from app.methods.registry import import_method_modules

    settings = Settings(**_embedded_overrides(data_dir))
    if host is not None or port is not None:
        settings = settings.model_copy(
            update={"host": host or settings.host, "port": port or settings.port}
        )
    if migrate is not None:
        settings = settings.model_copy(update={"migrate_on_start": migrate})
    settings.check_serving()
    import_method_modules(settings.method_module_names())
    return settings


class _ProxyOptions(TypedDict):
    proxy_headers: bool
    forwarded_allow_ips: list[str]


def _proxies(settings: Settings) -> _ProxyOptions:
    """uvicorn's forwarded-header options from ``DPSYN_FORWARDED_ALLOW_IPS`` alone. Left to
    itself uvicorn believes ``X-Forwarded-For`` from 127.0.0.1 (or from its own
    ``FORWARDED_ALLOW_IPS``), so any local process could pose as a new address to the
    per-address failure limits; a list, even empty, keeps it from reading that variable."""
    allowed = settings.forwarded_allow_list()
    return {"proxy_headers": bool(allowed), "forwarded_allow_ips": allowed}


def migrate_command(
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir", help="Embedded state (the SQLite database unless DPSYN_DATABASE_URL)."
        ),
    ] = DATA_DIR,
) -> None:
    """Bring the database to the latest schema, add DPSYN_BOOTSTRAP_API_KEY if set, and exit.

    The one-shot step of a deployment with several API replicas: run it once before (or while
    stopping) the replicas, which then start with DPSYN_MIGRATE_ON_START=false.
    """
    from app.db.migrate import current_revision, upgrade
    from app.db.session import session_scope
    from app.services.tenants import ensure_bootstrap_key

    try:
        settings = Settings(**_embedded_overrides(data_dir))
    except ValueError as error:
        raise fail(str(error).replace("\n", " ")) from None
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    before = current_revision(settings.database_url)
    upgrade(settings.database_url)
    after = current_revision(settings.database_url)
    change = "already" if before == after else f"migrated from {before or 'empty'}, now"
    _say(f"dpsyn: database {database} {change} at revision {after}")
    if settings.bootstrap_api_key:  # here, once, so that replicas only find it
        with session_scope(settings.database_url) as session:
            ensure_bootstrap_key(session, settings.bootstrap_api_key)
        _say("dpsyn: DPSYN_BOOTSTRAP_API_KEY is an admin key of the tenant 'default'")


class _Overrides(TypedDict, total=False):
    """Settings given as arguments (they win over the environment); typed for Settings(...)."""

    database_url: str


def _embedded_overrides(data_dir: Path) -> _Overrides:
    """The embedded SQLite database in ``data_dir`` unless DPSYN_DATABASE_URL names one."""
    if "DPSYN_DATABASE_URL" in os.environ:
        return {}
    make_data_dir(data_dir)
    return {"database_url": embedded_database_url(data_dir)}


def worker_command(
    queue: Annotated[str, typer.Option("--queue", "-Q", help="Queue to consume.")] = "dpsyn",
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Jobs at once (one per local model).")
    ] = 1,
    pool: Annotated[str, typer.Option("--pool", help="Celery pool: solo, threads, prefork.")] = (
        "solo"
    ),
    loglevel: Annotated[
        str, typer.Option("--loglevel", help="Celery log level: DEBUG, INFO, WARNING, ERROR.")
    ] = "INFO",
    hostname: Annotated[
        str | None,
        typer.Option("--hostname", "-n", help="Node name (Celery's default: celery@HOST)."),
    ] = None,
) -> None:
    """Run a Celery worker of the distributed deployment (needs DPSYN_BROKER_URL)."""
    settings = Settings()
    if not settings.broker_url:
        raise fail("dpsyn worker needs DPSYN_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    from app.methods.registry import import_method_modules

    try:  # before the worker's module, which imports them too, so that a failure is one line
        import_method_modules(settings.method_module_names())
    except ValueError as error:
        raise fail(str(error)) from None
    if settings.backend is BackendKind.VLLM and os.environ.get("DPSYN_TEST_FAKE_BACKEND") != "1":
        _check_engine(settings)
    from app.services.queue import load_runtime

    quiet_progress_bars()  # each worker loads the model once, into its log
    argv = celery_worker_argv(
        queue=queue, concurrency=concurrency, pool=pool, loglevel=loglevel, hostname=hostname
    )
    load_runtime(settings).worker_main(argv)


def celery_worker_argv(
    *, queue: str, concurrency: int, pool: str, loglevel: str, hostname: str | None
) -> list[str]:
    """Celery's ``worker`` arguments for ``dpsyn worker``.

    Without gossip, mingle and heartbeat events: a solo-pool worker handles no event while it
    runs a job, so after every job it read the other workers' heartbeats of the last minutes
    at once and logged "Substantial drift ... clocks are out of sync". dpsyn uses none of
    them: jobs are handed out through the queue, health is the alive file
    (``dpsyn-worker-health``), and no task is revoked through Celery's remote control.
    """
    return [
        "worker",
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        f"--queues={queue}",
        f"--loglevel={loglevel}",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        *([f"--hostname={hostname}"] if hostname else []),
    ]


def _check_engine(settings: Settings) -> None:
    """Fail the worker's start, naming the fix, when its vLLM server cannot run a job.

    Without this a server started without a flag the backend needs (the tokenizer-info
    endpoint, enough --max-logprobs, another served name) let the worker start healthy and
    every job fail later. An unreachable server is waited for (it may still be loading the
    model) for ``DPSYN_VLLM_START_WAIT_S``.
    """
    import time

    from app.llm.base import BackendError, TransientBackendError
    from app.llm.vllm_http import VLLMHttpBackend, served_model

    if not settings.vllm_url:
        raise fail("DPSYN_BACKEND=vllm needs DPSYN_VLLM_URL (e.g. http://127.0.0.1:8000)")
    deadline = time.monotonic() + settings.vllm_start_wait_s
    while True:
        try:
            model = settings.model or served_model(settings.vllm_url)
            with VLLMHttpBackend(url=settings.vllm_url, model=model) as backend:
                backend.check()
            _say(f"dpsyn worker: vLLM at {settings.vllm_url} serves {model!r}: ready")
            return
        except TransientBackendError as error:
            if time.monotonic() >= deadline:
                raise fail(
                    f"the vLLM server is not reachable after {settings.vllm_start_wait_s:g} s "
                    f"(DPSYN_VLLM_START_WAIT_S): {error}"
                ) from None
            time.sleep(2)
        except BackendError as error:
            raise fail(f"the vLLM server cannot run dpsyn's jobs: {error}") from None


def worker_health_command(
    max_age: Annotated[
        float, typer.Option("--max-age", min=1, help="Seconds; an older alive file is unhealthy.")
    ] = DEFAULT_MAX_AGE_S,
) -> None:
    """Exit 0 while this container's worker is alive (its DPSYN_WORKER_ALIVE_FILE is fresh).

    A container healthcheck: unlike ``celery inspect ping`` it answers while a solo-pool
    worker runs a long job, since the job's lease heartbeat keeps the file fresh. Containers
    run the same check as ``dpsyn-worker-health``, which skips loading this command line.
    """
    try:
        typer.echo(check_worker_alive(Settings().worker_alive_file, max_age))
    except UnhealthyError as error:
        raise fail(str(error)) from None
