"""api keys count what they asked of the engine

The OpenAI-compatible endpoint (``POST /v1/chat/completions``, ``POST /v1/completions``)
lets a read key ask the service's model for text, so each key's use is counted: requests,
prompt tokens and completion tokens answered, shown to the tenant's admins in
``GET /v1/keys``. Existing keys start at 0. Dropping the columns (downgrade) loses the counts.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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
