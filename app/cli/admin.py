"""``dpsyn admin``: tenants and API keys, straight on the configured database.

An operator's tool, not a client of the API: it needs database access (``DPSYN_DATABASE_URL``,
else the embedded ``./.dpsyn/dpsyn.db``), which is the privilege it stands for. There is
deliberately no HTTP route that creates tenants: every API key belongs to one tenant, and a
key that could act across tenants would be the one credential whose leak exposes all of them.
The one cross-tenant key, ``org:read`` (every tenant's budgets, read-only, nothing
else), is therefore created here only (``dpsyn admin keys create TENANT --scope org:read``).

A new key is printed once, alone on stdout (so that ``KEY=$(dpsyn admin ...)`` works), and only
its hash is stored. Messages go to stderr. A problem exits with status 1 (a refused change: a
duplicate name, an unknown tenant) or 2 (usage, or a database this dpsyn cannot use).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.cli.errors import err, fail
from app.cli.http_client import print_json, print_rows
from app.cli.key_table import KeyNameOpt
from app.cli.timestamps import shown_time
from app.db.models import ApiKey, KeyScope, Tenant, as_utc

admin_app = typer.Typer(
    help="Operator administration on the configured database: tenants and their API keys.",
    no_args_is_help=True,
)
tenants_app = typer.Typer(help="Create, list, disable and enable tenants.", no_args_is_help=True)
keys_app = typer.Typer(help="Create, list and revoke a tenant's API keys.", no_args_is_help=True)
admin_app.add_typer(tenants_app, name="tenants")
admin_app.add_typer(keys_app, name="keys")

DataDirOpt = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        help="Embedded state: its SQLite database is used unless DPSYN_DATABASE_URL is set.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json/--no-json", help="Print JSON.")]
# The tenant the disable, enable and keys commands act on.
TenantArg = Annotated[str, typer.Argument(help="Name or ID.")]


def _say(message: str) -> None:
    err.print(message, markup=False, highlight=False, soft_wrap=True)


def database_url(data_dir: Path) -> str:
    """``DPSYN_DATABASE_URL`` (through the settings), else the embedded database."""
    from app.cli.serve import embedded_database_url
    from app.settings import Settings

    if "DPSYN_DATABASE_URL" in os.environ:
        try:
            return Settings().database_url
        except ValueError as error:
            raise fail(str(error).replace("\n", " ")) from None
    return embedded_database_url(data_dir)


def _check_schema(url: str) -> None:
    """Refuse a database that is missing or not at this package's schema, naming the fix
    (never creating an empty SQLite file on the way)."""
    from app.db.migrate import current_revision, head_revision

    shown = make_url(url).render_as_string(hide_password=True)
    if url.startswith("sqlite"):
        path = make_url(url).database
        if not path or path == ":memory:" or not Path(path).is_file():
            raise fail(
                f"no database at {path or shown}: run 'dpsyn migrate' (or start 'dpsyn serve' "
                "there), or set DPSYN_DATABASE_URL"
            )
    try:
        current = current_revision(url)
    except SQLAlchemyError as error:
        raise fail(f"cannot read the database {shown} ({type(error).__name__})") from None
    head = head_revision()
    if current != head:
        raise fail(
            f"the database {shown} is at revision {current or 'none'}, this dpsyn expects "
            f"{head}: run 'dpsyn migrate'"
        )


@contextmanager
def _session(data_dir: Path) -> Iterator[Session]:
    """A committing session on a database at this package's schema; a service error ends the
    command with its message (exit 1), a database error with its kind."""
    from app.db.session import session_scope
    from app.services.errors import ServiceError

    url = database_url(data_dir)
    _check_schema(url)
    try:
        with session_scope(url) as session:
            yield session
    except ServiceError as error:
        _say(f"error: {error.message}")
        raise typer.Exit(code=1) from None
    except SQLAlchemyError as error:
        _say(f"error: database error ({type(error).__name__})")
        raise typer.Exit(code=1) from None


def _tenant_row(tenant: Tenant, live_keys: int | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": tenant.id,
        "name": tenant.name,
        "disabled": tenant.disabled_at is not None,
        "disabled_at": as_utc(tenant.disabled_at).isoformat() if tenant.disabled_at else None,
        "created_at": as_utc(tenant.created_at).isoformat(),
    }
    if live_keys is not None:
        row["live_keys"] = live_keys
    return row


def _key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "name": key.name,
        "scope": key.scope,
        "revoked": key.revoked,
        "created_at": as_utc(key.created_at).isoformat(),
        "last_used_at": as_utc(key.last_used_at).isoformat() if key.last_used_at else None,
        "usage_requests": key.usage_requests,
        "usage_prompt_tokens": key.usage_prompt_tokens,
        "usage_completion_tokens": key.usage_completion_tokens,
    }


# --- tenants --------------------------------------------------------------------------------


@tenants_app.command("create")
def tenants_create(
    name: Annotated[str, typer.Argument(help="A unique name.")],
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """Create a tenant and its first admin key (printed once)."""
    from app.services.storable import TENANT_NAME_MAX_CHARS
    from app.services.tenants import create_tenant

    if not name.strip() or len(name) > TENANT_NAME_MAX_CHARS:
        raise fail(f"the tenant name must be 1 to {TENANT_NAME_MAX_CHARS} characters")
    with _session(data_dir) as session:
        tenant, raw = create_tenant(session, name)
        row = _tenant_row(tenant)
    if as_json:
        print_json({**row, "key": raw})
        return
    _say(f"created tenant {name!r} ({row['id']}); its admin API key (shown once):")
    typer.echo(raw)


@tenants_app.command("list")
def tenants_list(as_json: JsonOpt = False, data_dir: DataDirOpt = Path(".dpsyn")) -> None:
    """Every tenant: ID, name, status, live keys."""
    from app.services.tenants import list_tenants

    with _session(data_dir) as session:
        rows = [_tenant_row(tenant, live) for tenant, live in list_tenants(session)]
    if as_json:
        print_json(rows)
        return
    print_rows(
        ["ID", "NAME", "STATUS", "LIVE KEYS", "CREATED"],
        [
            [
                row["id"],
                row["name"],
                "disabled" if row["disabled"] else "active",
                str(row["live_keys"]),
                shown_time(row["created_at"]),
            ]
            for row in rows
        ],
    )


def _set_disabled(tenant_ref: str, disabled: bool, data_dir: Path) -> None:
    from app.services.tenants import find_tenant, set_disabled

    with _session(data_dir) as session:
        tenant = set_disabled(session, find_tenant(session, tenant_ref), disabled)
        name = tenant.name
    state = "disabled: its keys are refused" if disabled else "enabled: its live keys work again"
    _say(f"tenant {name!r} {state}")


@tenants_app.command("disable")
def tenants_disable(
    tenant: TenantArg,
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """Refuse every key of the tenant (401) until enabled again; its data and ledger stay.
    Jobs already queued or running are not stopped (cancel them first if needed)."""
    _set_disabled(tenant, True, data_dir)


@tenants_app.command("enable")
def tenants_enable(
    tenant: TenantArg,
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """Undo ``disable`` (revoked keys stay revoked)."""
    _set_disabled(tenant, False, data_dir)


# --- keys -----------------------------------------------------------------------------------


@keys_app.command("create")
def keys_create(
    tenant: TenantArg,
    scope: Annotated[
        KeyScope,
        typer.Option(
            "--scope",
            help="admin: everything of the tenant; prompts:read: use prompts; org:read: every "
            "tenant's budgets, read-only (the organisation's view).",
        ),
    ] = KeyScope.ADMIN,
    name: KeyNameOpt = None,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """Create a key for the tenant (printed once). An org:read key reads every tenant's
    budgets; it still belongs to this tenant (disabling the tenant disables it)."""
    from app.services.tenants import create_key_for, find_tenant

    with _session(data_dir) as session:
        found = find_tenant(session, tenant)
        key, raw = create_key_for(session, found, scope, name)
        row, tenant_name = _key_row(key), found.name
    if as_json:
        print_json({**row, "key": raw})
        return
    named = f" {row['name']!r}" if row["name"] else ""
    _say(
        f"created a {row['scope']} key{named} {row['id']} for tenant {tenant_name!r} (shown once):"
    )
    typer.echo(raw)


@keys_app.command("list")
def keys_list(
    tenant: TenantArg,
    as_json: JsonOpt = False,
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """The tenant's keys (IDs, names, scopes, last use; the keys themselves are never
    stored)."""
    from app.cli.key_table import KEY_COLUMNS, key_cells
    from app.services.tenants import find_tenant, list_keys

    with _session(data_dir) as session:
        rows = [_key_row(key) for key in list_keys(session, find_tenant(session, tenant).id)]
    if as_json:
        print_json(rows)
        return
    print_rows(KEY_COLUMNS, [key_cells(row) for row in rows])


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's ID (from 'keys list').")],
    data_dir: DataDirOpt = Path(".dpsyn"),
) -> None:
    """Revoke a key for good (any tenant's)."""
    from app.services.tenants import revoke_key_by_id

    with _session(data_dir) as session:
        key = revoke_key_by_id(session, key_id)
        tenant_id = key.tenant_id
    _say(f"revoked key {key_id} of tenant {tenant_id}")
