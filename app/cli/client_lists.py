"""List, show and delete on the server, as the API offers them: ``dpsyn datasets show|delete``,
``dpsyn jobs list``, ``dpsyn prompts list`` and ``dpsyn keys list|create|revoke``.

The commands join the groups of :mod:`app.cli.client` (kept there: upload, submit, get ...)
and use its one HTTP client, :mod:`app.cli.http_client`. Each takes ``--json`` for the API's
JSON as it is. A delete (or a key's revocation) asks first unless ``--yes``.

``dpsyn keys`` are the keys of the caller's own tenant, through the API with an admin key;
``dpsyn admin keys`` (:mod:`app.cli.admin`) is the operator's tool for any tenant, on the
database. Both print the same columns, and a new key alone on stdout (shown once).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from app.cli.client import datasets_app, jobs_app, print_dataset, prompts_app
from app.cli.http_client import (
    Api,
    ClientError,
    JsonOpt,
    KeyOpt,
    UrlOpt,
    YesOpt,
    confirm,
    err,
    exit_with,
    print_json,
    print_rows,
    request,
)
from app.cli.key_table import KEY_COLUMNS, key_cells
from app.db.models import JobStatus, KeyScope

LimitOpt = Annotated[
    int, typer.Option("--limit", min=1, max=500, help="At most this many rows (newest first).")
]
OffsetOpt = Annotated[int, typer.Option("--offset", min=0, help="Skip this many rows first.")]


def _page(limit: int, offset: int, **filters: str | None) -> dict[str, Any]:
    """Query parameters: the page, and the filters given."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    params.update({name: value for name, value in filters.items() if value is not None})
    return params


# --- datasets -------------------------------------------------------------------------------


@datasets_app.command("show")
def datasets_show(
    dataset_id: Annotated[str, typer.Argument(help="Dataset ID.")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A dataset's metadata: name, kind, task, records per label (never a record)."""
    dataset = request(url, key, "GET", f"/v1/datasets/{dataset_id}")
    if as_json:
        print_json(dataset)
        return
    print_dataset(dataset)
    typer.echo(f"created {dataset['created_at'][:19]}")
    if dataset.get("deleted_at"):
        typer.echo(f"records deleted {dataset['deleted_at'][:19]} (its ledger stays)")


@datasets_app.command("delete")
def datasets_delete(
    dataset_id: Annotated[str, typer.Argument(help="Dataset ID.")],
    yes: YesOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a dataset's records for good. Its queued jobs are cancelled (a running one must
    be cancelled first); the dataset's row, budget ledger and prompts stay."""
    try:
        with Api(url, key) as api:
            dataset = api.call("GET", f"/v1/datasets/{dataset_id}")
            deleted = None
            if not dataset.get("deleted_at"):
                confirm(
                    f"Delete the {dataset['record_count']} records of dataset {dataset_id} "
                    f"'{dataset['name']}'? Its ledger and prompts stay; this cannot be undone.",
                    yes,
                )
                deleted = api.call("DELETE", f"/v1/datasets/{dataset_id}")
    except ClientError as error:
        exit_with(error)
    if as_json:
        print_json(deleted or dataset)
    elif deleted is None:
        typer.echo(f"dataset {dataset_id}'s records were already deleted; nothing changed")
    else:
        typer.echo(f"deleted the records of dataset {dataset_id} '{deleted['name']}'")


# --- jobs -----------------------------------------------------------------------------------


def _charged(job: dict[str, Any]) -> str:
    """The charged epsilon when the server says it (newer servers), else the job's cost."""
    value = job.get("charged_epsilon", job["epsilon"])
    return "-" if value is None else f"{value:.4g}"


@jobs_app.command("list")
def jobs_list(
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Only jobs on this dataset (ID).")
    ] = None,
    status: Annotated[
        JobStatus | None, typer.Option("--status", help="Only jobs in this state.")
    ] = None,
    limit: LimitOpt = 100,
    offset: OffsetOpt = 0,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your jobs, newest first: status, method, epsilon, dataset and prompt."""
    params = _page(limit, offset, dataset_id=dataset, status=status.value if status else None)
    rows = request(url, key, "GET", "/v1/jobs", params=params)
    if as_json:
        print_json(rows)
        return
    charged = any("charged_epsilon" in row for row in rows)
    print_rows(
        ["id", "status", "method", "epsilon", *(["charged"] if charged else []), "dataset",
         "prompt", "created"],
        [
            [
                row["id"],
                row["status"],
                row["method"],
                f"{row['epsilon']:.4g}",
                *([_charged(row)] if charged else []),
                _dataset_cell(row),
                row.get("prompt_id") or "-",
                row["created_at"][:19],
            ]
            for row in rows
        ],
    )  # fmt: skip


# --- prompts --------------------------------------------------------------------------------


class PromptSort(StrEnum):
    """How ``prompts list`` orders its page."""

    CREATED = "created"
    VALIDATION = "validation"


@prompts_app.command("list")
def prompts_list(
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Only prompts of this dataset (ID).")
    ] = None,
    limit: LimitOpt = 100,
    offset: OffsetOpt = 0,
    sort: Annotated[
        PromptSort,
        typer.Option("--sort", help="created: newest first; validation: best score first."),
    ] = PromptSort.CREATED,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your prompts, newest first: method, dataset (name and ID), task, epsilon, validation
    score (marked when it does not beat zero-shot), job."""
    rows = request(url, key, "GET", "/v1/prompts", params=_page(limit, offset, dataset_id=dataset))
    if sort is PromptSort.VALIDATION:  # unscored last, then as listed
        rows = sorted(rows, key=lambda r: -(r.get("validation_accuracy") or -1.0))
    if as_json:
        print_json(rows)
        return
    print_rows(
        ["id", "method", "dataset", "task", "epsilon", "kind", "validation", "job", "created"],
        [
            [
                row["id"],
                row["method"],
                _dataset_cell(row),
                row["task"] or "-",
                f"{row['epsilon']:.4g}",
                "soft prompt" if row.get("soft_prompt") else "text",
                _validation_cell(row),
                row["job_id"],
                row["created_at"][:19],
            ]
            for row in rows
        ],
    )


def _validation_cell(row: dict[str, Any]) -> str:
    """The validation accuracy, marked when it does not beat zero-shot (-: no score)."""
    accuracy = row.get("validation_accuracy")
    if accuracy is None:
        return "-"
    below = " (not above zero-shot)" if row.get("beats_zero_shot") is False else ""
    return f"{accuracy:.3f}{below}"


def _dataset_cell(row: dict[str, Any]) -> str:
    """The dataset's name and ID (the ID alone from a server that sends no name)."""
    name = row.get("dataset_name")
    return f"{name} ({row['dataset_id']})" if name else row["dataset_id"]


# --- keys -----------------------------------------------------------------------------------

keys_app = typer.Typer(
    help="API keys of your own tenant (needs an admin key). Operators: 'dpsyn admin keys'.",
    no_args_is_help=True,
)


def _key_rows(rows: list[dict[str, Any]]) -> None:
    """The columns of ``dpsyn admin keys list``."""
    print_rows(KEY_COLUMNS, [key_cells(row) for row in rows])


@keys_app.command("list")
def keys_list(url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False) -> None:
    """Your tenant's keys (IDs and scopes; the keys themselves are never stored)."""
    rows = request(url, key, "GET", "/v1/keys")
    if as_json:
        print_json(rows)
    else:
        _key_rows(rows)


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
    name: Annotated[
        str | None,
        typer.Option("--name", help="What the key is for (1-100 printable characters)."),
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a key for your tenant; it is printed once, alone on stdout. (org:read keys
    are the operator's: 'dpsyn admin keys create'.)"""
    body: dict[str, str] = {"scope": scope.value}
    if name is not None:
        body["name"] = name  # checked by the server (a 422 naming the rule)
    created = request(url, key, "POST", "/v1/keys", json=body)
    if as_json:
        print_json(created)
        return
    named = f" {created['name']!r}" if created.get("name") else ""
    err.print(
        f"created a {created['scope']} key{named} {created['id']} (shown once):", markup=False
    )
    typer.echo(created["key"])


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's ID (from 'dpsyn keys list').")],
    yes: YesOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke one of your tenant's keys for good (the key in use too, if you name it)."""
    confirm(f"Revoke key {key_id}? Requests with it are refused from now on.", yes)
    revoked = request(url, key, "DELETE", f"/v1/keys/{key_id}")
    if as_json:
        print_json(revoked)
    else:
        err.print(f"revoked key {key_id}", markup=False)
