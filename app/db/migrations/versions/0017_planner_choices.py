"""AdaDPSyn planner choices shared by every process

The planner simulates synthetic teachers for each public shape (seconds; the largest part of
a cold quote) and its answer depends on public values only, so it is remembered in
``planner_choices`` by the SHA-256 of the shape and the planner's constants, as
``calibrations`` (0009) remembers noise calibrations. Public values only: no record, no tenant.
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    op.create_table(
        "planner_choices",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("choice", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("planner_choices")
