"""Migration 0025 (issue 55.7), on SQLite and PostgreSQL: prompts stored with the model's
markup (``<b>``, ``</h3>``, ``&amp;``) and the display ellipsis of a cut (`` …``) are rewritten
clean, their text rendered again from the cleaned demonstrations; what was clean, a
PromptPATE prompt and a prompt whose text is not its demonstrations' rendering stay as they
were; downgrade leaves the rows as they are."""

from __future__ import annotations

import json

from alembic import command
from sqlalchemy import text

from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import TaskSpec
from tests.api.test_migration_0002 import (  # noqa: F401 (the fixture)
    empty_url,
    schema_differences,
    seed_datasets,
    seeded_at,
)

NOW = {"now": "2026-01-01 00:00:00"}
TASK = TaskSpec(
    name="tickets",
    kind="classification",
    instruction="Given a queue, write a support ticket for that queue.",
    icl_instruction="Route the tickets.",
    text_field="Ticket",
    label_field="Queue",
    labels=["billing", "outage"],
)
MARKED = [
    {"label": "billing", "text": "<b>Invoice 3</b> was charged twice &amp; late"},
    {"label": "outage", "text": "</h3>Server down since the <span …"},
    {"label": "billing", "text": "<b></b>"},  # markup only: left out
]
CLEAN = [{"label": "outage", "text": "The login page fails"}]


def _prompt(conn, pid: str, demos: list[dict], method: str = "tang", prompt: str | None = None):
    job = f"j{pid}"
    conn.execute(
        text(
            "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, event, "
            "epsilon, delta, status, progress_done, progress_total, touched_data, "
            "cancel_requested, attempts, created_at) VALUES (:j, 't', 'd', :m, '{}', '[]', "
            "'{}', 1.0, 0.001, 'succeeded', 1, 1, :true, :false, 1, :now)"
        ),
        {**NOW, "j": job, "m": method, "true": True, "false": False},
    )
    pairs = [(d["label"], d["text"]) for d in demos]
    conn.execute(
        text(
            "INSERT INTO prompt_sets (id, tenant_id, job_id, dataset_id, task, demonstrations, "
            "prompt, method, model, epsilon, delta, created_at) VALUES (:p, 't', :j, 'd', "
            ":task, :demos, :prompt, :m, 'gemma-3-270m', 1.0, 0.001, :now)"
        ),
        {
            **NOW,
            "p": pid,
            "j": job,
            "m": method,
            "task": TASK.model_dump_json(),
            "demos": json.dumps(demos),
            "prompt": demonstration_prompt(TASK, pairs) if prompt is None else prompt,
        },
    )


def _rows(conn) -> dict[str, tuple[list[dict], str]]:
    rows = conn.execute(text("SELECT id, demonstrations, prompt FROM prompt_sets")).all()
    return {r.id: (r.demonstrations if isinstance(r.demonstrations, list)
                   else json.loads(r.demonstrations), r.prompt) for r in rows}  # fmt: skip


def _seed(conn) -> None:
    seed_datasets(conn)
    _prompt(conn, "marked", MARKED)
    _prompt(conn, "clean", CLEAN)
    _prompt(conn, "pate", MARKED, method="promptpate")
    _prompt(conn, "other", MARKED, prompt="a text of its own")


def test_0025_cleans_stored_demonstrations_and_their_prompt(
    empty_url: str,  # noqa: F811
    tmp_path,
    monkeypatch,
) -> None:
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    with seeded_at(empty_url, "0024", _seed) as (config, engine):
        with engine.connect() as conn:
            before = _rows(conn)
        command.upgrade(config, "head")  # 0025, and the later revisions' schema for the models
        assert schema_differences(engine) == []
        with engine.connect() as conn:
            after = _rows(conn)
        demos, prompt = after["marked"]
        assert demos == [
            {"label": "billing", "text": "Invoice 3 was charged twice & late"},
            {"label": "outage", "text": "Server down since the"},
        ]
        assert prompt == demonstration_prompt(TASK, [(d["label"], d["text"]) for d in demos])
        assert "<" not in prompt and "…" not in prompt and "&amp;" not in prompt
        for pid in ("clean", "pate", "other"):
            assert after[pid] == before[pid], pid
        command.downgrade(config, "0024")
        with engine.connect() as conn:
            assert _rows(conn) == after
