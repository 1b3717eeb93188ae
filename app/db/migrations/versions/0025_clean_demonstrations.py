"""stored demonstrations lose their markup and the display ellipsis of a cut

Until this revision a token-loop demonstration (tang, adadpsyn) was stored as the model
wrote it, HTML and markdown included (``<b>Invoice 3</b>``, ``</h3>``, ``&amp;``, ``**``),
and one that T_max cut ended with `` …``, the mark views use for text they shorten. Both
went into every prompt's text, its JSON and its chat messages. Demonstrations are now
cleaned before they are stored (``app.synthesis.markup``); this rewrites the prompts stored
before, so that what a prompt serves is clean whenever it was made (one rule for every
prompt; nothing to clean on each read). Each demonstration's text becomes
:func:`~app.synthesis.markup.clean_stored` of it; one that is markup only is left out (an
empty demonstration is never served). The prompt's text is rendered again from the cleaned
demonstrations when it was the rendering of the old ones (every token-loop prompt); a prompt
whose text is something else, or whose task this code cannot read, is left as it is
(demonstrations and text agree). Cleaning is post-processing of a DP output: nothing is
charged.

A prompt's validation score was measured with the markup in its text; it is kept as it was.
The old text is not kept: downgrade leaves the rows as they are.
"""

from typing import Any

import sqlalchemy as sa
from alembic import op
from pydantic import ValidationError

from app.synthesis.markup import clean_stored
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import TaskSpec

revision = "0025"
down_revision = "0024"

_PROMPTS = sa.table(
    "prompt_sets",
    sa.column("id", sa.String),
    sa.column("task", sa.JSON),
    sa.column("demonstrations", sa.JSON),
    sa.column("prompt", sa.Text),
    sa.column("method", sa.String),
)
#: The methods whose demonstrations the model wrote (PromptPATE's are public records, whose
#: HTML it has always removed; a soft prompt has none).
GENERATED = ("tang", "adadpsyn")


def cleaned(task: dict[str, Any], demos: list[Any], prompt: str) -> tuple[list[Any], str] | None:
    """A stored prompt's demonstrations and text, cleaned; None when nothing changes."""
    new = [{**d, "text": clean_stored(str(d.get("text", "")))} for d in demos]
    new = [d for d in new if d["text"]]
    if new == demos:
        return None
    try:
        spec = TaskSpec.model_validate(task)
    except ValidationError:  # a task this code cannot render: the row stays as it is
        return None
    old_pairs = [(str(d.get("label", "")), str(d.get("text", ""))) for d in demos]
    if prompt != demonstration_prompt(spec, old_pairs):
        return None  # not the rendering of its demonstrations: no text to render again
    return new, demonstration_prompt(spec, [(str(d["label"]), d["text"]) for d in new])


def upgrade() -> None:
    bind = op.get_bind()
    columns = (_PROMPTS.c.id, _PROMPTS.c.task, _PROMPTS.c.demonstrations, _PROMPTS.c.prompt)
    rows = bind.execute(sa.select(*columns).where(_PROMPTS.c.method.in_(GENERATED))).all()
    for row in rows:
        change = cleaned(dict(row.task or {}), list(row.demonstrations or []), row.prompt)
        if change is None:
            continue
        demos, prompt = change
        bind.execute(
            _PROMPTS.update()
            .where(_PROMPTS.c.id == row.id)
            .values(demonstrations=demos, prompt=prompt)
        )


def downgrade() -> None:
    """Nothing to undo: the markup and the marks are gone by design."""
