"""The columns a key list prints, shared by ``dpsyn keys list`` (through the API) and ``dpsyn
admin keys list`` (on the database), so that both show the same table; and the ``--name``
both ``keys create`` commands take."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.cli.timestamps import shown_time

KeyNameOpt = Annotated[
    str | None, typer.Option("--name", help="What the key is for (1-100 printable characters).")
]

KEY_COLUMNS = ["ID", "NAME", "SCOPE", "STATUS", "CREATED", "LAST USED", "REQUESTS", "TOKENS IN/OUT"]


def key_cells(row: dict[str, Any]) -> list[str]:
    """One key's cells under :data:`KEY_COLUMNS` (also ``dpsyn admin keys list``'s). A server
    before migration 0014 sends no name or last use: shown as "-" and "never"; one before
    0018 no usage: "-". The usage counts the key's prompt uses and completions."""
    last = row.get("last_used_at")
    return [
        row["id"],
        row.get("name") or "-",
        row["scope"],
        "revoked" if row["revoked"] else "live",
        shown_time(row["created_at"]),
        shown_time(last, missing="never"),
        str(row.get("usage_requests", "-")),
        _tokens(row),
    ]


def _tokens(row: dict[str, Any]) -> str:
    """The prompt and completion tokens a key's requests used, "IN/OUT"."""
    if "usage_prompt_tokens" not in row:
        return "-"
    return f"{row['usage_prompt_tokens']}/{row.get('usage_completion_tokens', 0)}"
