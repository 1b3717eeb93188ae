"""budgets have a warn threshold

The dashboard colours a budget's bar and the alert route (``GET /v1/budgets?over_threshold=
true``) lists a dataset once its composed spend reaches this fraction of its epsilon. Existing
budgets get the default, 0.8 (80 %). A budget's threshold is public metadata, like its epsilon;
dropping the column (downgrade) loses only the thresholds set since.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    # Plain ALTER TABLE (as 0004): a batch would recreate ``budgets`` on SQLite.
    op.add_column(
        "budgets",
        sa.Column("warn_threshold", sa.Float(), nullable=False, server_default="0.8"),
    )


def downgrade() -> None:
    op.drop_column("budgets", "warn_threshold")  # SQLite >= 3.35 drops a plain column in place
