"""who read a dataset's records, and records dropped after a retention period

``record_reads``: one row per read of a dataset's records (a job's worker, an advice run, a
validation), written before the records are opened; never a record's text.
``datasets.records_dropped_at``: when the retention setting (``DPSYN_RECORD_RETENTION_DAYS``)
dropped the records and destroyed their data key (the row, budget, ledger and prompts stay).

Downgrade drops both: the reads recorded so far are lost, and a dataset whose records were
dropped looks like one whose records were kept (it has none left; a job on it fails).
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"


def upgrade() -> None:
    op.create_table(
        "record_reads",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("dataset_id", sa.String(32), sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("reader_kind", sa.String(16), nullable=False),
        sa.Column("reader_id", sa.String(32), nullable=False),
        sa.Column("process", sa.String(200), nullable=False),
        sa.Column("record_count", sa.Integer, nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_record_reads_dataset_id", "record_reads", ["dataset_id"])
    # Plain ALTER TABLE (as 0020): a batch would recreate ``datasets`` on SQLite.
    op.add_column("datasets", sa.Column("records_dropped_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    # SQLite >= 3.35 drops a plain column in place.
    op.drop_column("datasets", "records_dropped_at")
    op.drop_index("ix_record_reads_dataset_id", table_name="record_reads")
    op.drop_table("record_reads")
