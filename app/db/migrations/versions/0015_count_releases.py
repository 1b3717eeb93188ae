"""a dataset's label counts are released once and charged once

``count_releases`` holds each release: the noisy counts as drawn, their noise multiplier, and
what the release cost (epsilon, delta). ``digest`` names the version of the dataset's records
it was drawn for (the SHA-256 of the exact counts the ``datasets`` row already holds; never
shown), so that changed records get a new release. Its charge is a ledger row of the new kind
``counts`` (``ledger.kind`` is a ``String(16)``: no schema change there), whose ``job_id`` is
the release's ID. Older jobs keep the releases their own events priced.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    op.create_table(
        "count_releases",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("dataset_id", sa.String(32), sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("sigma", sa.Float(), nullable=False),
        sa.Column("noisy", sa.JSON(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("dataset_id", "digest", name="uq_count_releases_version"),
    )
    op.create_index("ix_count_releases_dataset_id", "count_releases", ["dataset_id"])


def downgrade() -> None:
    op.drop_index("ix_count_releases_dataset_id", table_name="count_releases")
    op.drop_table("count_releases")
