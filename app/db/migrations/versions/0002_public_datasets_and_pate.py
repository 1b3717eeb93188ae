"""public datasets and PromptPATE jobs

Datasets get a ``kind`` (existing rows are private); jobs get the public dataset a PromptPATE
job labels and the ``stats`` of a finished run (PromptPATE: queries answered). The columns are
added in batch mode so that SQLite (which cannot add a foreign key to an existing table)
recreates ``jobs``; PostgreSQL alters in place.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

FOREIGN_KEY = "fk_jobs_public_dataset_id_datasets"


def upgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=16), server_default="private", nullable=False)
        )

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("public_dataset_id", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("stats", sa.JSON(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_jobs_public_dataset_id"), ["public_dataset_id"], unique=False
        )
        batch_op.create_foreign_key(FOREIGN_KEY, "datasets", ["public_dataset_id"], ["id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint(FOREIGN_KEY, type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_jobs_public_dataset_id"))
        batch_op.drop_column("stats")
        batch_op.drop_column("public_dataset_id")

    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_column("kind")
