"""api keys count what they asked of the engine

The OpenAI-compatible endpoint (``POST /v1/chat/completions``, ``POST /v1/completions``)
lets a read key ask the service's model for text, so each key's use is counted: requests,
prompt tokens and completion tokens answered, shown to the tenant's admins in
``GET /v1/keys``. Existing keys start at 0. Dropping the columns (downgrade) loses the counts.
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"

COLUMNS = ("usage_requests", "usage_prompt_tokens", "usage_completion_tokens")


def upgrade() -> None:
    # Plain ALTER TABLE (as 0014): a batch would recreate ``api_keys`` on SQLite.
    for name in COLUMNS:
        op.add_column(
            "api_keys", sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    for name in reversed(COLUMNS):
        op.drop_column("api_keys", name)
