"""api keys have a name and a last-used time

A key's creator may name it (``POST /v1/keys {"name": ...}``, ``dpsyn keys create --name``,
``dpsyn admin keys create --name``); authentication records when a key was last used, at most
once a minute per key. Both columns are nullable: existing keys have no name and have not been
seen since. Dropping them (downgrade) loses only the names and times.

The ``org:read`` scope needs no schema change: ``api_keys.scope`` is a ``String(32)``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    # Plain ALTER TABLE (as 0004, 0010): a batch would recreate ``api_keys`` on SQLite.
    op.add_column("api_keys", sa.Column("name", sa.String(100), nullable=True))
    op.add_column("api_keys", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # SQLite >= 3.35 drops a plain column in place.
    op.drop_column("api_keys", "last_used_at")
    op.drop_column("api_keys", "name")
