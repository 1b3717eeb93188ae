"""a tamper-evident ledger: hash chains per dataset, and holds after a restore

Every ledger row gets its place in its dataset's hash chain (``chain_seq``, ``chain_hash``,
``app.ledger.chain``) and ``chain_origin``. The chains are started from the rows that exist
now, in ID order per dataset, marked ``chain_origin = 'migration'``: from now on an edit of
any of them is detected, but what they held before this migration is taken as it is. A
unique index on (``dataset_id``, ``chain_seq``) keeps a chain from forking.
``ledger_holds`` holds the datasets whose database is behind the ledger's exported heads
(``app.ledger.heads``). Downgrade drops both (the chains are then forgotten; upgrading again
starts them anew from the rows as they are).
"""

import sqlalchemy as sa
from alembic import op

from app.db.ledger_hash import GENESIS, Content, Origin, entry_hash, timestamp

revision = "0021"
down_revision = "0020"

# The columns as the service reads them (JSON parsed, timestamps as datetimes), so that the
# hashes computed here are the ones the service recomputes.
_ledger = sa.table(
    "ledger",
    sa.column("id", sa.Integer),
    sa.column("dataset_id", sa.String),
    sa.column("job_id", sa.String),
    sa.column("kind", sa.String),
    sa.column("epsilon", sa.Float),
    sa.column("delta", sa.Float),
    sa.column("event", sa.JSON),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("batch_id", sa.String),
    sa.column("chain_seq", sa.Integer),
    sa.column("chain_hash", sa.String),
    sa.column("chain_origin", sa.String),
)


def _start_chains() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_ledger).order_by(_ledger.c.dataset_id, _ledger.c.id)).all()
    heads: dict[str, tuple[int, str]] = {}
    for row in rows:
        seq, previous = heads.get(row.dataset_id, (0, GENESIS))
        content = Content(
            dataset_id=row.dataset_id,
            seq=seq + 1,
            origin=Origin.MIGRATION,
            job_id=row.job_id,
            kind=row.kind,
            epsilon=float(row.epsilon),
            delta=float(row.delta),
            event=row.event,
            created_at=timestamp(row.created_at),
            batch_id=row.batch_id,
        )
        digest = entry_hash(content, previous)
        conn.execute(
            _ledger.update()
            .where(_ledger.c.id == row.id)
            .values(chain_seq=seq + 1, chain_hash=digest, chain_origin=Origin.MIGRATION)
        )
        heads[row.dataset_id] = (seq + 1, digest)


def upgrade() -> None:
    # Plain ALTER TABLE (as 0019): a batch would recreate ``ledger`` on SQLite.
    op.add_column("ledger", sa.Column("chain_seq", sa.Integer, nullable=True))
    op.add_column("ledger", sa.Column("chain_hash", sa.String(64), nullable=True))
    op.add_column("ledger", sa.Column("chain_origin", sa.String(16), nullable=True))
    _start_chains()
    op.create_index("uq_ledger_chain", "ledger", ["dataset_id", "chain_seq"], unique=True)
    op.create_table(
        "ledger_holds",
        sa.Column("dataset_id", sa.String(32), primary_key=True),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("database_seq", sa.Integer, nullable=False),
        sa.Column("exported_seq", sa.Integer, nullable=False),
        sa.Column("exported_hash", sa.String(64), nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reapplied", sa.Integer, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("ledger_holds")
    op.drop_index("uq_ledger_chain", table_name="ledger")
    # SQLite >= 3.35 drops a plain column in place.
    op.drop_column("ledger", "chain_origin")
    op.drop_column("ledger", "chain_hash")
    op.drop_column("ledger", "chain_seq")
