"""What the client command groups share: the positional IDs, list paging and the table
file suffixes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

TABLE_SUFFIXES = {".csv", ".tsv", ".jsonl", ".ndjson"}


# The positional IDs the show, get and delete commands take.
DatasetIdArg = Annotated[str, typer.Argument(help="Dataset ID, or its unique name.")]
JobIdArg = Annotated[str, typer.Argument(help="Job ID.")]
LimitOpt = Annotated[
    int, typer.Option("--limit", min=1, max=500, help="At most this many rows (newest first).")
]
OffsetOpt = Annotated[int, typer.Option("--offset", min=0, help="Skip this many rows first.")]


def _page(limit: int, offset: int, **filters: str | None) -> dict[str, Any]:
    """Query parameters: the page, and the filters given."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    params.update({name: value for name, value in filters.items() if value is not None})
    return params
