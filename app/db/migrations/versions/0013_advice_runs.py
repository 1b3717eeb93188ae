"""advice runs: candidates measured on a public labelled dataset before spending

``POST /v1/advice`` runs the methods on a public labelled dataset as if it were private and
stores what it measured (``app.eval.advice``). Public inputs and outputs only: no budget, no
ledger entry. A new table; nothing existing changes. Dropping it (downgrade) loses only the
stored advice.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    op.create_table(
        "advice_runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("dataset_id", sa.String(32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_advice_runs_tenant_id", "advice_runs", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_advice_runs_tenant_id", table_name="advice_runs")
    op.drop_table("advice_runs")
