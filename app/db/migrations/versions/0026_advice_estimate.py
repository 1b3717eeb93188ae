"""an advice run says, while it runs, how long the rest will take

``dpsyn advise`` prints the time the rest of its runs will take, from the runs it has
measured (``app.eval.run_estimate``); an advice run of the service showed only its count of
runs. ``estimate`` holds the same line, as the runner last wrote it (the API serves it only
while the run runs). Plain ALTER TABLE (as 0016); existing rows get none.
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"


def upgrade() -> None:
    op.add_column("advice_runs", sa.Column("estimate", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("advice_runs", "estimate")
