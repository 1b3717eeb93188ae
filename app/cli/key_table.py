"""The columns a key list prints, shared by ``dpsyn keys list`` (through the API) and ``dpsyn
admin keys list`` (on the database), so that both show the same table."""

from __future__ import annotations

from typing import Any

KEY_COLUMNS = ["ID", "NAME", "SCOPE", "STATUS", "CREATED", "LAST USED"]


def key_cells(row: dict[str, Any]) -> list[str]:
    """One key's cells under :data:`KEY_COLUMNS` (also ``dpsyn admin keys list``'s). A server
    before migration 0014 sends no name or last use: shown as "-" and "never"."""
    last = row.get("last_used_at")
    return [
        row["id"],
        row.get("name") or "-",
        row["scope"],
        "revoked" if row["revoked"] else "live",
        row["created_at"][:19],
        last[:19] if last else "never",
    ]
