"""job leases

A running job's attempt holds a lease (its owner and expiry), renewed by the worker's
heartbeat; reapers fail running jobs whose lease expired. Jobs that are running when this
migration runs were started by workers without leases: they get a lease that has already
expired, so that the first reaper settles them (the old workers must be stopped before the
upgrade; see docs/service.md).
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=200), nullable=True))
        batch_op.add_column(
            sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
    jobs = sa.table(
        "jobs",
        sa.column("status", sa.String),
        sa.column("lease_expires_at", sa.DateTime(timezone=True)),
    )
    op.execute(
        jobs.update().where(jobs.c.status == "running").values(lease_expires_at=datetime.now(UTC))
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_owner")
