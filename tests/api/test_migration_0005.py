"""Migration 0005 on a database holding 0004 rows, on SQLite and PostgreSQL: an existing
prompt set keeps its data and has no soft prompt, a soft prompt's bytes round-trip exactly
(the database's binary type), the schema matches the models, and it downgrades."""

from __future__ import annotations

import numpy as np
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.db.migrate import alembic_config
from app.db.models import Base, PromptSet
from app.promptdpsgd.artifact import SoftPrompt
from app.services.jobs import attach_soft_prompt
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}
ROWS = [
    "INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)",
    "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, record_count, "
    "created_at) VALUES ('d', 't', 'old', 'private', '{}', '{}', 0, :now)",
    "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, event, epsilon, "
    "delta, status, progress_done, progress_total, touched_data, cancel_requested, attempts, "
    "created_at) VALUES ('j', 't', 'd', 'tang', '{}', '[]', '{}', 1.0, 1e-5, 'succeeded', 0, 0, "
    "false, false, 1, :now)",
    "INSERT INTO prompt_sets (id, tenant_id, job_id, dataset_id, task, demonstrations, prompt, "
    "method, model, epsilon, delta, created_at) VALUES ('p', 't', 'j', 'd', '{}', '[]', "
    "'old prompt', 'tang', 'm', 1.0, 1e-5, :now)",
]


def test_0005_adds_the_soft_prompt_columns_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0004")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            for statement in ROWS:
                conn.execute(text(statement), NOW)
        command.upgrade(config, "head")
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        soft = SoftPrompt("m", np.random.default_rng(0).normal(size=(3, 8)))
        with Session(engine) as session:
            old = session.get(PromptSet, "p")
            assert old is not None and old.prompt == "old prompt"
            assert old.soft_prompt is None and old.soft_prompt_sha256 is None
            attach_soft_prompt(old, soft)
            session.commit()
        with Session(engine) as session:
            row = session.get(PromptSet, "p")
            assert row is not None and row.soft_prompt is not None
            assert bytes(row.soft_prompt) == soft.to_bytes()
            assert row.soft_prompt_sha256 == soft.sha256
            assert (row.soft_prompt_length, row.soft_prompt_hidden) == (3, 8)
            back = SoftPrompt.from_bytes(bytes(row.soft_prompt))
            assert np.array_equal(back.embeddings, soft.embeddings)
        command.downgrade(config, "0004")
        with engine.connect() as conn:
            columns = conn.execute(text("SELECT * FROM prompt_sets")).keys()
            assert not any(name.startswith("soft_prompt") for name in columns)
            assert conn.execute(text("SELECT prompt FROM prompt_sets")).scalar_one() == "old prompt"
        command.upgrade(config, "head")
    finally:
        engine.dispose()
