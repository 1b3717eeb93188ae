"""datasets carry the owner's opt-in that their label counts are public

A private dataset's per-label record counts are private by default: a job releases the
counts it plans with under DP, charged to the budget (``app.privacy.unit``). The data owner
may declare them public, per dataset, at upload or later (``PUT /v1/datasets/{id}/
counts-public``); jobs then plan with the exact counts and release none. The declaration is
audited: ``counts_public_at`` and ``counts_public_by`` (an API key's ID) say when and by whom
the current setting was chosen. Existing datasets get false (counts private) and NULLs: the
jobs they run from now on release their counts, as a new dataset's do. Budgets and the
ledger are untouched. Dropping the columns (downgrade) loses only the declarations.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    # Plain ALTER TABLE (as 0004, 0010 and 0011): a batch would recreate ``datasets`` on
    # SQLite. No foreign key on the key's ID (as jobs.submitted_by): a key row is never
    # deleted, and SQLite cannot drop a column a foreign key names.
    op.add_column(
        "datasets",
        sa.Column("counts_public", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "datasets", sa.Column("counts_public_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("datasets", sa.Column("counts_public_by", sa.String(32), nullable=True))


def downgrade() -> None:
    op.drop_column("datasets", "counts_public_by")
    op.drop_column("datasets", "counts_public_at")
    op.drop_column("datasets", "counts_public")
