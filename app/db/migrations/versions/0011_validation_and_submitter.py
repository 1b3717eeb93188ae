"""prompt sets carry a validation score; jobs record their submitter and validation set

A job may name a public labelled dataset (``jobs.validation_dataset_id``); once its prompt is
stored, the worker scores the prompt on up to a fixed number of that dataset's records and
writes the result to ``prompt_sets.validation`` (JSON: dataset ID, status, n, accuracy or the
reason it was not scored). This is post-processing of a DP output on public data: it costs
no privacy and nothing is charged. ``jobs.submitted_by`` is the ID of the API key that
submitted a job. All three columns are nullable: older rows have none, and jobs made outside
the API have no submitter. Dropping them (downgrade) loses only those values.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    # Plain ALTER TABLE (as 0004 and 0010): a batch would recreate the tables on SQLite. No
    # foreign keys, so that SQLite can drop the columns in place on downgrade.
    op.add_column("jobs", sa.Column("validation_dataset_id", sa.String(32), nullable=True))
    op.add_column("jobs", sa.Column("submitted_by", sa.String(32), nullable=True))
    op.add_column("prompt_sets", sa.Column("validation", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("prompt_sets", "validation")
    op.drop_column("jobs", "submitted_by")
    op.drop_column("jobs", "validation_dataset_id")
