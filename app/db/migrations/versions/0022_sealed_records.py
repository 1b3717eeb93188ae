"""private records sealed at rest: one AES-GCM value per record under its dataset's data key

``dataset_records`` held each record's ``text`` and ``label`` in plain text. Each dataset now
gets a data key in the key folder outside the database (``app.db.record_keys``, the
settings' ``DPSYN_RECORD_KEYS_DIR``), each record is sealed with it into ``sealed``, and the
plain columns are dropped. The rows are rewritten in place, so the old text can linger in
the database's free pages: SQLite's freed pages are zeroed (``secure_delete``) and the file
is vacuumed and its WAL emptied afterwards (``app.db.migrate``), PostgreSQL's table is
rewritten by ``VACUUM FULL``. Copies taken before
(backups, dumps, replicas) still hold the plain text: replace them. A deleted dataset has
no records left, so it gets no key.

Downgrade opens every record again into ``text`` and ``label`` (the keys must still be
there; a dataset whose key is gone keeps no records).
"""

import sqlalchemy as sa
from alembic import op

from app.db import record_keys

revision = "0022"
down_revision = "0021"

_BATCH = 2000


def _records(*columns: sa.ColumnClause) -> sa.TableClause:
    return sa.table("dataset_records", sa.column("id", sa.Integer),
                    sa.column("dataset_id", sa.String), *columns)  # fmt: skip


def _seal_all() -> None:
    """Seal each dataset's rows with its data key (made here), batch by batch."""
    bind, keys = op.get_bind(), record_keys.current()
    table = _records(sa.column("text", sa.Text), sa.column("label", sa.String),
                     sa.column("sealed", sa.LargeBinary))  # fmt: skip
    datasets = bind.execute(sa.select(table.c.dataset_id).distinct()).scalars().all()
    for dataset_id in datasets:
        last = 0
        while True:
            rows = bind.execute(
                sa.select(table.c.id, table.c.text, table.c.label)
                .where(table.c.dataset_id == dataset_id, table.c.id > last)
                .order_by(table.c.id)
                .limit(_BATCH)
            ).all()
            if not rows:
                break
            sealed = keys.seal_records(dataset_id, [(r.text, r.label) for r in rows])
            for row, value in zip(rows, sealed, strict=True):
                bind.execute(sa.update(table).where(table.c.id == row.id).values(sealed=value))
            last = rows[-1].id


def _vacuum() -> None:
    """PostgreSQL: rewrite the table so that no dead row keeps the plain text. (SQLite's
    connections zero freed pages, ``secure_delete``; ``app.db.migrate.upgrade`` vacuums
    the file and empties its WAL after this migration, outside any transaction.)"""
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.execute("VACUUM FULL dataset_records")


def upgrade() -> None:
    with op.batch_alter_table("dataset_records") as batch:
        batch.add_column(sa.Column("sealed", sa.LargeBinary(), nullable=True))
    _seal_all()
    with op.batch_alter_table("dataset_records") as batch:
        batch.drop_column("text")
        batch.drop_column("label")
        batch.alter_column("sealed", existing_type=sa.LargeBinary(), nullable=False)
    _vacuum()


def downgrade() -> None:
    with op.batch_alter_table("dataset_records") as batch:
        batch.add_column(sa.Column("text", sa.Text(), nullable=True))
        batch.add_column(sa.Column("label", sa.String(500), nullable=True))
    bind, keys = op.get_bind(), record_keys.current()
    table = _records(sa.column("text", sa.Text), sa.column("label", sa.String),
                     sa.column("sealed", sa.LargeBinary))  # fmt: skip
    datasets = bind.execute(sa.select(table.c.dataset_id).distinct()).scalars().all()
    for dataset_id in datasets:
        rows = bind.execute(
            sa.select(table.c.id, table.c.sealed).where(table.c.dataset_id == dataset_id)
        ).all()
        opened = keys.open_records(dataset_id, [r.sealed for r in rows])
        for row, (text, label) in zip(rows, opened, strict=True):
            bind.execute(
                sa.update(table).where(table.c.id == row.id).values(text=text, label=label)
            )
    with op.batch_alter_table("dataset_records") as batch:
        batch.drop_column("sealed")
        batch.alter_column("text", existing_type=sa.Text(), nullable=False)
        batch.alter_column("label", existing_type=sa.String(500), nullable=False)
