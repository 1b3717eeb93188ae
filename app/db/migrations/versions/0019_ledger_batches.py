"""ledger entries record the batch their job was declared in

Jobs declared together in one request (``POST /v1/jobs/batch``) are not adaptive among
themselves, and the ledger's filter (``app.privacy.filter``) may price them as one
mechanism: each reserve entry records the batch (its own job ID for a job submitted alone;
NULL on rows written before, which read as their own job's). Dropping the column (downgrade)
forgets which jobs were declared together: they then price as submitted one by one.
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"


def upgrade() -> None:
    # Plain ALTER TABLE (as 0014): a batch would recreate ``ledger`` on SQLite.
    op.add_column("ledger", sa.Column("batch_id", sa.String(32), nullable=True))


def downgrade() -> None:
    op.drop_column("ledger", "batch_id")
