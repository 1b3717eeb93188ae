"""jobs carry an outbox mark: when their task was last sent

``dispatched_at`` is set in the transaction that admits a job, so the job and the fact that
its task must be sent are committed together; dispatchers (every worker, every API process)
send a queued job again once its mark is older than ``DPSYN_REDISPATCH_AFTER_S`` and move the
mark. Before it, a job whose task never reached Redis (API killed between commit and send,
Redis restarted without persistence) stayed ``queued`` for good, holding its reservation.

Jobs queued when this migration runs get their admission time, so those admitted longer than
the bound ago are sent again by the first dispatcher (a copy of a task still in Redis only
finds its job started or finished and does nothing). Other jobs keep NULL: the mark only
matters while a job is queued. Plain ``ADD COLUMN`` (see 0004): no table is recreated.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
    jobs = sa.table(
        "jobs",
        sa.column("status", sa.String),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("dispatched_at", sa.DateTime(timezone=True)),
    )
    op.execute(
        jobs.update().where(jobs.c.status == "queued").values(dispatched_at=jobs.c.created_at)
    )


def downgrade() -> None:
    op.drop_column("jobs", "dispatched_at")  # SQLite >= 3.35 drops a plain column in place
