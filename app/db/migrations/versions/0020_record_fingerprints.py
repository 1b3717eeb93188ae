"""budgets follow the records: keyed record fingerprints, and datasets that share a budget

``record_fingerprints`` holds, per tenant, the keyed fingerprint of each private record ever
uploaded (HMAC-SHA256 under the server's ``DPSYN_FINGERPRINT_KEY`` of the normalised text;
never a plain hash) and the dataset it was first uploaded in; rows are never deleted.
``datasets.budget_dataset_id`` names the dataset whose budget and ledger a dataset charges
(NULL: its own), set at upload with ``budget_of``. Existing datasets keep their own budgets
and have no fingerprints: only uploads from now on are checked against each other (and
against nothing uploaded before). Dropping both (downgrade) forgets which records were seen
and which datasets shared a budget: each then charges its own budget again.
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"


def upgrade() -> None:
    op.create_table(
        "record_fingerprints",
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(32), sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "fingerprint"),
    )
    op.create_index("ix_record_fingerprints_dataset_id", "record_fingerprints", ["dataset_id"])
    # Plain ALTER TABLE (as 0011, 0014): a batch would recreate ``datasets`` on SQLite. No
    # foreign key (as ``jobs.validation_dataset_id``), so that SQLite can drop the column in
    # place on downgrade; the service checks the link itself (the same tenant, a private
    # dataset, its root owner).
    op.add_column("datasets", sa.Column("budget_dataset_id", sa.String(32), nullable=True))
    op.create_index("ix_datasets_budget_dataset_id", "datasets", ["budget_dataset_id"])


def downgrade() -> None:
    op.drop_index("ix_datasets_budget_dataset_id", table_name="datasets")
    # SQLite >= 3.35 drops a plain column in place (its index is gone first).
    op.drop_column("datasets", "budget_dataset_id")
    op.drop_index("ix_record_fingerprints_dataset_id", table_name="record_fingerprints")
    op.drop_table("record_fingerprints")
