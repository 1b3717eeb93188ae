"""advice runs are a queue shared by every process, with leases

Before, an advice run lived in the memory of the API process that accepted it: a second
replica starting marked every tenant's queued and running runs failed, and the replica still
running then wrote ``succeeded`` over them. Now a run is claimed from the table by whichever
runner is free (``owner``, ``lease_expires_at``, renewed while it runs); a run is failed only
once its lease has run out; ``cancel_requested`` stops a running one; ``position`` is the
tenant's place in its own queue when the run was created, so that runners take every tenant's
first run before any tenant's second. Plain ALTER TABLE (as 0014); existing rows get no owner
and position 0.
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    op.add_column("advice_runs", sa.Column("owner", sa.String(64), nullable=True))
    op.add_column(
        "advice_runs", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "advice_runs",
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "advice_runs", sa.Column("position", sa.Integer(), nullable=False, server_default="0")
    )
    op.create_index("ix_advice_runs_status", "advice_runs", ["status"])


def downgrade() -> None:
    op.drop_index("ix_advice_runs_status", table_name="advice_runs")
    for column in ("position", "cancel_requested", "lease_expires_at", "owner"):
        op.drop_column("advice_runs", column)
