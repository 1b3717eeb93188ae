"""A restored older database is found at start (app.ledger.heads): the dataset is held,
its admissions are refused until ``dpsyn admin ledger acknowledge`` re-applies the spend
the restore lost, after which the budget's remaining is what it was before the restore."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from app.cli import app as cli
from app.db.models import Budget, LedgerHold
from app.db.session import get_engine, session_scope
from app.ledger import chain, ledger
from app.main import _startup
from app.settings import Settings
from tests.api.conftest import Api, api, error_of  # noqa: F401 (the fixture)
from tests.ledger.test_chain import _admit
from tests.ledger.test_ledger_postgres import make_dataset

runner = CliRunner()


def _spend(url: str, dataset: str) -> float:
    with session_scope(url) as session:
        return ledger.spend(session, session.get(Budget, dataset)).epsilon


def _restart(url: str) -> list[str]:
    """What the service does at start; the datasets held now."""
    _startup(Settings(database_url=url), sessionmaker(bind=get_engine(url)))
    with session_scope(url) as session:
        return [h.dataset_id for h in session.query(LedgerHold) if h.acknowledged_at is None]


def _restore(url: str, backup: Path) -> None:
    database = Path(url.removeprefix("sqlite:///"))
    get_engine(url).dispose()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copy(backup, database)


def test_a_restored_backup_is_held_until_the_lost_spend_is_reapplied(
    sqlite_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("DPSYN_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("DPSYN_LEDGER_HEADS_PATH", raising=False)  # the default: beside it
    dataset = make_dataset(sqlite_url, 100.0)
    other = make_dataset(sqlite_url, 100.0)
    _admit(sqlite_url, dataset, "j1")
    _admit(sqlite_url, other, "k1")
    with session_scope(sqlite_url) as session:
        ledger.commit(session, "j1")
    backup = tmp_path / "backup.db"
    source = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with sqlite3.connect(backup) as target:
        source.backup(target)
    source.close()
    for job in ("j2", "j3"):
        _admit(sqlite_url, dataset, job)
    with session_scope(sqlite_url) as session:
        ledger.commit(session, "j2")
        ledger.release(session, "j3")
    before = _spend(sqlite_url, dataset)
    assert (tmp_path / "dpsyn.ledger-heads.jsonl").is_file()
    assert (tmp_path / "dpsyn.ledger-heads.jsonl").stat().st_mode & 0o777 == 0o600

    _restore(sqlite_url, backup)
    assert _spend(sqlite_url, dataset) < before  # the restore forgot j2's spend
    assert _restart(sqlite_url) == [dataset]  # the other dataset lost nothing
    with pytest.raises(ledger.LedgerHeldError, match="dpsyn admin ledger acknowledge"):
        _admit(sqlite_url, dataset, "j4")
    _admit(sqlite_url, other, "k2")  # admissions elsewhere go on
    verified = runner.invoke(cli, ["admin", "ledger", "verify"])
    assert verified.exit_code == 1
    assert f"dataset {dataset}: the exported head (position 6)" in verified.output

    done = runner.invoke(cli, ["admin", "ledger", "acknowledge", dataset])
    assert done.exit_code == 0, done.output
    assert "4 entries re-applied" in done.output
    assert _spend(sqlite_url, dataset) == before
    with session_scope(sqlite_url) as session:
        origins = [e.chain_origin for e in ledger.history(session, dataset)]
        assert origins == [None, None] + [chain.Origin.RESTORED] * 4
    assert runner.invoke(cli, ["admin", "ledger", "verify"]).exit_code == 0
    assert _restart(sqlite_url) == []  # the acknowledged chain is the exported one now
    _admit(sqlite_url, dataset, "j4")
    again = runner.invoke(cli, ["admin", "ledger", "acknowledge", dataset])
    assert again.exit_code == 1
    assert "is not held" in again.output


def test_the_api_refuses_a_held_dataset_with_409(api: Api, sqlite_url) -> None:  # noqa: F811
    """A job submitted on a held dataset (or on one sharing its budget) is a 409
    ``ledger_rolled_back`` that names the operator's command."""
    dataset = api.upload(counts_public=True)["id"]
    assert api.budget(dataset, 3.0).status_code == 200
    assert api.submit(dataset, 1.0).status_code == 201
    with session_scope(sqlite_url) as session:
        session.add(
            LedgerHold(dataset_id=dataset, database_seq=0, exported_seq=1, exported_hash="0" * 64)
        )
    refused = api.submit(dataset, 1.0)
    assert refused.status_code == 409
    body = error_of(refused)
    assert body["code"] == "ledger_rolled_back"
    assert f"dpsyn admin ledger acknowledge {dataset}" in body["message"]
