"""prompt sets can hold a soft prompt (PromptDPSGD)

A PromptDPSGD job releases a soft prompt: a ``length x hidden`` matrix of input embeddings
for one model, stored as a safetensors file (``app.promptdpsgd.artifact``). It is stored in
its prompt set's row, not in a table of its own: a prompt set has at most one, it is released
and deleted with the prompt set (a DP output, kept when its dataset is deleted), and its
model is the prompt set's ``model``. The bytes are a deferred column, so reading and listing
prompt sets never load them. All four columns are NULL for other methods' prompt sets.

Plain ``ADD COLUMN`` on both databases (nullable, no default): no table is recreated.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"

COLUMNS = ("soft_prompt", "soft_prompt_sha256", "soft_prompt_length", "soft_prompt_hidden")


def upgrade() -> None:
    # Plain ALTER TABLE, not batch mode (see 0004): a batch would recreate ``prompt_sets``.
    op.add_column("prompt_sets", sa.Column("soft_prompt", sa.LargeBinary(), nullable=True))
    op.add_column(
        "prompt_sets", sa.Column("soft_prompt_sha256", sa.String(length=64), nullable=True)
    )
    op.add_column("prompt_sets", sa.Column("soft_prompt_length", sa.Integer(), nullable=True))
    op.add_column("prompt_sets", sa.Column("soft_prompt_hidden", sa.Integer(), nullable=True))


def downgrade() -> None:
    for name in reversed(COLUMNS):  # SQLite >= 3.35 drops a plain column in place
        op.drop_column("prompt_sets", name)
