"""The tamper-evident ledger (app.ledger.chain, app.ledger.heads) on SQLite and a real
PostgreSQL: ``dpsyn admin ledger verify`` passes an untouched ledger and names the first
broken entry of an edited, deleted, inserted or reordered row; concurrent admissions keep
every chain whole."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from app.cli import app as cli
from app.db.migrate import upgrade
from app.db.session import session_scope
from app.ledger import chain, ledger
from app.privacy.accounting import Accounting
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)
from tests.ledger.test_ledger_postgres import (
    DELTA,
    concurrent_admissions,
    job_event,
    make_dataset,
)

runner = CliRunner()


@pytest.fixture
def db_url(empty_url, tmp_path, monkeypatch) -> str:  # noqa: F811
    """A migrated database of this test's own (SQLite, then PostgreSQL), its heads exported
    to the test's directory."""
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    monkeypatch.setenv("DPSYN_DATABASE_URL", empty_url)
    upgrade(empty_url)
    return empty_url


def _admit(url: str, dataset_id: str, job_id: str) -> None:
    event, epsilon = job_event()
    with session_scope(url) as session:
        ledger.admit(
            session,
            dataset_id=dataset_id,
            job_id=job_id,
            event=event,
            epsilon=epsilon,
            delta=DELTA,
            accounting=Accounting.TIGHT,
        )


def _ledger(url: str) -> tuple[str, list[int]]:
    """A dataset with three jobs (one committed, one released, one running) beside another
    dataset's job; the first dataset's entry IDs, in order."""
    dataset = make_dataset(url, 100.0)
    other = make_dataset(url, 100.0)
    for job in ("j1", "j2", "j3"):
        _admit(url, dataset, job)
    _admit(url, other, "k1")
    with session_scope(url) as session:
        ledger.commit(session, "j1", reason="done")
        ledger.release(session, "j2", reason="never read the data")
    return dataset, _ids(url, dataset)


def _ids(url: str, dataset: str) -> list[int]:
    with session_scope(url) as session:
        rows = session.execute(
            text("SELECT id FROM ledger WHERE dataset_id = :d ORDER BY id"), {"d": dataset}
        )
        return [row[0] for row in rows]


def _sql(url: str, statement: str, **params) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement), params)
    finally:
        engine.dispose()


def _verify():
    return runner.invoke(cli, ["admin", "ledger", "verify"])


def test_an_untouched_ledger_verifies(db_url):
    dataset, ids = _ledger(db_url)
    result = _verify()
    assert result.exit_code == 0, result.output
    assert "ok: 2 chains verified" in result.output
    with session_scope(db_url) as session:
        found = chain.verify(session)
        assert found.breaks == []
        assert found.heads[dataset][0] == len(ids) == 5


def test_halving_every_epsilon_is_reported_at_the_first_entry(db_url):
    dataset, ids = _ledger(db_url)
    _sql(db_url, "UPDATE ledger SET epsilon = epsilon / 2")
    result = _verify()
    assert result.exit_code == 1
    assert f"dataset {dataset}: ledger entry {ids[0]} (position 1)" in result.output
    assert "does not match its content" in result.output


def test_a_deleted_row_is_reported_at_the_entry_after_it(db_url):
    _, ids = _ledger(db_url)
    _sql(db_url, "DELETE FROM ledger WHERE id = :id", id=ids[1])
    result = _verify()
    assert result.exit_code == 1
    assert f"ledger entry {ids[2]} (position 3)" in result.output
    assert "was deleted" in result.output


def test_a_deleted_last_row_is_caught_by_the_exported_head(db_url):
    dataset, ids = _ledger(db_url)
    _sql(db_url, "DELETE FROM ledger WHERE id = :id", id=ids[-1])
    result = _verify()
    assert result.exit_code == 1
    assert f"dataset {dataset}: the exported head (position 5)" in result.output


def test_a_row_inserted_by_hand_is_reported(db_url):
    dataset, _ = _ledger(db_url)
    _sql(
        db_url,
        "INSERT INTO ledger (dataset_id, job_id, kind, epsilon, delta, event, created_at) "
        "VALUES (:d, 'fake', 'release', 1, 1e-6, '{}', '2026-01-01 00:00:00')",
        d=dataset,
    )
    result = _verify()
    assert result.exit_code == 1
    assert "not chained (inserted by hand?)" in result.output
    assert f"ledger entry {max(_ids(db_url, dataset))}" in result.output


def test_reordered_rows_are_reported(db_url):
    _, ids = _ledger(db_url)
    spare = max(ids) + 1000
    _sql(db_url, "UPDATE ledger SET id = :spare WHERE id = :id", spare=spare, id=ids[1])
    _sql(db_url, "UPDATE ledger SET id = :new WHERE id = :id", new=ids[1], id=ids[2])
    _sql(db_url, "UPDATE ledger SET id = :new WHERE id = :id", new=ids[2], id=spare)
    result = _verify()
    assert result.exit_code == 1
    assert f"ledger entry {ids[1]} (position 3)" in result.output
    assert "out of the chain's order" in result.output


def test_a_rewritten_chain_is_caught_by_the_exported_head(db_url):
    """SHA-256 has no secret: someone who edits a row and recomputes every hash after it
    leaves a chain that verifies by itself, but its head is not the exported one."""
    dataset, _ = _ledger(db_url)
    _sql(db_url, "UPDATE ledger SET epsilon = epsilon / 2 WHERE dataset_id = :d", d=dataset)
    with session_scope(db_url) as session:
        previous = chain.GENESIS
        for entry in ledger.history(session, dataset):
            entry.chain_hash = chain.entry_hash(chain.Content.of(entry), previous)
            previous = entry.chain_hash
    with session_scope(db_url) as session:
        assert chain.verify(session).breaks == []
    result = _verify()
    assert result.exit_code == 1
    assert f"dataset {dataset}: the exported head" in result.output


def test_concurrent_admissions_keep_the_chain_whole(postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DPSYN_LEDGER_HEADS_PATH", str(tmp_path / "heads.jsonl"))
    event, epsilon = job_event()
    dataset = make_dataset(postgres_url, 1000.0)
    admitted = concurrent_admissions(postgres_url, dataset, event, epsilon, 12, prefix="c")
    assert all(admitted)
    with session_scope(postgres_url) as session:
        found = chain.verify(session)
        assert [b for b in found.breaks if b.dataset_id == dataset] == []
        assert found.heads[dataset][0] == 12
    lines = (tmp_path / "heads.jsonl").read_text().splitlines()
    assert len(lines) == 12  # one exported line per committed entry
