"""``dpsyn keys list|create|revoke``: the API keys of the caller's own tenant, through the
API with an admin key.

``dpsyn admin keys`` (:mod:`app.cli.admin`) is the operator's tool for any tenant, on the
database. Both print the same columns (:mod:`app.cli.key_table`), and a new key alone on
stdout (shown once). A revocation asks first unless ``--yes``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.cli.http_client import Reply, YesOpt, confirm, err, print_rows
from app.cli.key_table import KEY_COLUMNS, KeyNameOpt, key_cells
from app.cli.options import GroupedTyper
from app.db.models import KeyScope

keys_app = GroupedTyper(
    help="API keys of your own tenant (needs an admin key). Operators: 'dpsyn admin keys'.",
    no_args_is_help=True,
)


def _key_rows(rows: list[dict[str, Any]]) -> None:
    """The columns of ``dpsyn admin keys list``."""
    print_rows(KEY_COLUMNS, [key_cells(row) for row in rows])


@keys_app.command("list")
def keys_list(server: Reply) -> None:
    """Your tenant's keys (IDs and scopes; the keys themselves are never stored)."""
    server.show(server.request("GET", "/v1/keys"), _key_rows)


@keys_app.command("create")
def keys_create(
    scope: Annotated[
        KeyScope,
        typer.Option(
            "--scope",
            help="prompts:read: read and use prompts (for an app); admin: everything of the "
            "tenant.",
        ),
    ] = KeyScope.PROMPTS_READ,
    name: KeyNameOpt = None,
    *,
    server: Reply,
) -> None:
    """Create a key for your tenant; it is printed once, alone on stdout. (org:read keys
    are the operator's: 'dpsyn admin keys create'.)"""
    body: dict[str, str] = {"scope": scope.value}
    if name is not None:
        body["name"] = name  # checked by the server (a 422 naming the rule)
    server.show(server.request("POST", "/v1/keys", json=body), _print_created)


def _print_created(created: dict[str, Any]) -> None:
    """A new key: what it is on stderr, the key alone on stdout."""
    named = f" {created['name']!r}" if created.get("name") else ""
    err.print(
        f"created a {created['scope']} key{named} {created['id']} (shown once):", markup=False
    )
    typer.echo(created["key"])


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's ID (from 'dpsyn keys list').")],
    yes: YesOpt = False,
    *,
    server: Reply,
) -> None:
    """Revoke one of your tenant's keys for good (the key in use too, if you name it)."""
    confirm(f"Revoke key {key_id}? Requests with it are refused from now on.", yes)
    revoked = server.request("DELETE", f"/v1/keys/{key_id}")
    server.show(revoked, lambda _: err.print(f"revoked key {key_id}", markup=False))
