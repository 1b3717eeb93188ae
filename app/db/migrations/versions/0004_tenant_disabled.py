"""tenants can be disabled

``dpsyn admin tenants disable`` sets ``disabled_at``; every key of a disabled tenant is refused
(401) until ``enable`` clears it. Nothing else of the tenant changes: its datasets, ledger and
keys stay, so that disabling is reversible and the ledger stays complete.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    # Plain ALTER TABLE, not batch mode: on SQLite a batch would recreate ``tenants``, and
    # dropping the old table fails while datasets and keys reference it (foreign keys on).
    op.add_column("tenants", sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "disabled_at")  # SQLite >= 3.35 drops a plain column in place
