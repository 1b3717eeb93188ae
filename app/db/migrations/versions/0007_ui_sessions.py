"""dashboard sessions are kept on the server, so signing out revokes them

Until now a dashboard session was only a signed cookie (key ID, expiry, nonce): signing out
asked the browser to forget it, but a copy of the cookie stayed valid until it expired. Each
sign-in is now a row, named by the SHA-256 of the cookie's nonce; every dashboard request
needs its row, and signing out deletes it. Rows of expired sessions are deleted at sign-in.

Cookies issued before this migration have no row: their holders sign in again once.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["key_id"], ["api_keys.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_ui_sessions_key_id"), "ui_sessions", ["key_id"], unique=False)
    op.create_index(op.f("ix_ui_sessions_expires_at"), "ui_sessions", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ui_sessions_expires_at"), table_name="ui_sessions")
    op.drop_index(op.f("ix_ui_sessions_key_id"), table_name="ui_sessions")
    op.drop_table("ui_sessions")
