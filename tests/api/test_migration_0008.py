"""Migration 0008 on SQLite and PostgreSQL: job errors stored by the old runner, which quoted
the backend's message (and so could quote a prompt), are rewritten; other errors are not."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from app.db.migrate import alembic_config
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)

NOW = {"now": "2026-01-01 00:00:00"}
CANARY = "Question: what is the secret canary 7f3a9? Answer:"
LEAKED = f"the model backend failed: HTTP 400 from vllm: cannot tokenize '{CANARY}'"
OURS = "the job ran longer than the limit of 60 s"
ROWS = (
    "INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)",
    "INSERT INTO datasets (id, tenant_id, name, kind, task, label_counts, record_count, "
    "created_at) VALUES ('d', 't', 'old', 'private', '{}', '{}', 0, :now)",
)
JOB = (
    "INSERT INTO jobs (id, tenant_id, dataset_id, method, config, schedule, event, epsilon, "
    "delta, status, progress_done, progress_total, touched_data, cancel_requested, attempts, "
    "created_at, error) VALUES (:id, 't', 'd', 'tang', '{}', '[]', '{}', 1.0, 1e-5, 'failed', "
    "0, 0, true, false, 1, :now, :error)"
)


def test_0008_scrubs_quoted_backend_messages(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0007")
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            for row in ROWS:
                conn.execute(text(row), NOW)
            for job_id, error in (("leaked", LEAKED), ("ours", OURS), ("none", None)):
                conn.execute(text(JOB), {"id": job_id, "error": error, **NOW})
        command.upgrade(config, "0008")
        with engine.connect() as conn:
            errors = dict(conn.execute(text("SELECT id, error FROM jobs")).all())
        assert CANARY not in str(errors)
        assert errors["leaked"].startswith("backend_failed: ")
        assert errors["ours"] == OURS
        assert errors["none"] is None
        command.downgrade(config, "0007")  # a no-op that must not fail
        command.upgrade(config, "head")
    finally:
        engine.dispose()
