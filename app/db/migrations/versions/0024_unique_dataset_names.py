"""dataset names unique per tenant among the datasets not deleted

A dataset's name stands for its ID in every request (``resolve_ref``); two live datasets of
one name made each such request a 409 ``ambiguous_name``. Existing duplicates are renamed
first, deterministically: per tenant and name, the live datasets in order of creation (then
ID), the first keeps the name and the others become ``name-2``, ``name-3``, ... (the first
number free among the tenant's live names, cut to fit 200 characters), as an upload without a
name is numbered now. Deleted datasets keep their names: a deleted dataset's name is free.

Downgrade drops the index; the renamed datasets keep their new names.
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"

_MAX = 200  # datasets.name
_LIVE = sa.text("deleted_at IS NULL")


def _renames(rows: list[tuple[str, str, str]]) -> dict[str, str]:
    """ID -> new name of each live dataset to rename; ``rows`` are (tenant, name, ID) in
    order of creation, then ID."""
    taken = {(tenant, name) for tenant, name, _ in rows}
    seen: set[tuple[str, str]] = set()
    renames = {}
    for tenant, name, dataset_id in rows:
        if (tenant, name) not in seen:
            seen.add((tenant, name))
            continue
        number = 2
        while (tenant, candidate := name[: _MAX - len(f"-{number}")] + f"-{number}") in taken:
            number += 1
        taken.add((tenant, candidate))
        renames[dataset_id] = candidate
    return renames


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT tenant_id, name, id FROM datasets WHERE deleted_at IS NULL "
            "ORDER BY created_at, id"
        )
    ).all()
    for dataset_id, name in _renames([tuple(row) for row in rows]).items():
        conn.execute(
            sa.text("UPDATE datasets SET name = :name WHERE id = :id"),
            {"name": name, "id": dataset_id},
        )
    op.create_index(
        "uq_datasets_live_name",
        "datasets",
        ["tenant_id", "name"],
        unique=True,
        sqlite_where=_LIVE,
        postgresql_where=_LIVE,
    )


def downgrade() -> None:
    op.drop_index("uq_datasets_live_name", table_name="datasets")
