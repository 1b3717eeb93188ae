"""noise calibrations are remembered in the database, so every API process reuses them

Admission calibrated every job's noise from scratch, seconds under load, although most jobs
share a handful of public shapes. A calibration is a function of public inputs only; this table
keeps each answer (the multiplier and its epsilon) by the SHA-256 of those inputs
(``app/privacy/calibration_cache.py``). Rows hold no record and no tenant. Dropping the table
(downgrade) loses nothing but time: calibrations are computed again.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "calibrations",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("multiplier", sa.Float(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )


def downgrade() -> None:
    op.drop_table("calibrations")
