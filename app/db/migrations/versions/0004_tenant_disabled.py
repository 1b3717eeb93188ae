"""tenants can be disabled

``dpsyn admin tenants disable`` sets ``disabled_at``; every key of a disabled tenant is refused
(401) until ``enable`` clears it. Nothing else of the tenant changes: its datasets, ledger and
keys stay, so that disabling is reversible and the ledger stays complete.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE, not batch mode: on SQLite a batch would recreate ``tenants``, and
    # dropping the old table fails while datasets and keys reference it (foreign keys on).
    op.add_column("tenants", sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "disabled_at")  # SQLite >= 3.35 drops a plain column in place
