"""AdaDPSyn planner choices shared by every process

The planner simulates synthetic teachers for each public shape (seconds; the largest part of
a cold quote) and its answer depends on public values only, so it is remembered in
``planner_choices`` by the SHA-256 of the shape and the planner's constants, as
``calibrations`` (0009) remembers noise calibrations. Public values only: no record, no tenant.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "planner_choices",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("choice", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("planner_choices")
