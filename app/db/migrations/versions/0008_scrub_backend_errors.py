"""job errors stored before 0008 lose the backend's message, which could quote a prompt

Until this revision a job that failed in the model backend stored ``the model backend failed:
<the backend's message>``, and model servers quote their input in error messages (a prompt
whole or in part, escaped, as token ids): record text in a field that the API and the
dashboard show. Errors are now a code and our own words (``workers/runner.py``,
``_describe_backend``). This rewrites the old ones to the code the runner now uses for an
error of unknown kind, so no stored error keeps text a server sent. The original message is
not kept anywhere; downgrade cannot restore it and leaves the rows as they are.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"

OLD_PREFIX = "the model backend failed:"
SCRUBBED = (
    "backend_failed: the model backend failed (its message, stored before revision 0008, "
    "was removed because it could quote the prompt)"
)


def upgrade() -> None:
    jobs = sa.table("jobs", sa.column("error", sa.Text))
    op.execute(jobs.update().where(jobs.c.error.like(OLD_PREFIX + "%")).values(error=SCRUBBED))


def downgrade() -> None:
    """Nothing to undo: the removed messages are gone by design."""
