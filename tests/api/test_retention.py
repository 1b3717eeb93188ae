"""Retention (``DPSYN_RECORD_RETENTION_DAYS``), on SQLite and PostgreSQL: a private dataset
whose last job ended more than the period ago, with none queued or running, loses its
records and its data key, keeps its row, budget, ledger and prompts, shows when, and refuses
new jobs (409 ``records_dropped``); one with an active job, or with no job ever, is kept.
Driven through the reaper's round and ``dpsyn admin records expire``, with the time given."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli import app as cli
from app.db import record_keys
from app.db.models import Dataset, Job, LedgerEntry, now
from app.db.session import session_scope
from app.services.datasets import record_count
from tests.api.conftest import MARKER, Api, auth, error_of, make_api
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)
from workers.lease import LeaseConfig, Reaper


@pytest.fixture
def api(empty_url: str) -> Iterator[Api]:  # noqa: F811
    """A database of its own (SQLite, PostgreSQL): expiry looks at every dataset in it."""
    yield from make_api(empty_url)


def _ran(api: Api) -> tuple[str, str]:
    """A funded dataset with one job run to success; (dataset ID, job ID)."""
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    api.run_job(job["id"])
    return dataset["id"], job["id"]


def _ledger(api: Api, dataset_id: str) -> int:
    with session_scope(api.url) as session:
        query = select(func.count()).where(LedgerEntry.dataset_id == dataset_id)
        return session.scalar(query) or 0


def test_records_past_the_period_are_dropped_with_their_key_and_the_rest_kept(api: Api) -> None:
    dataset_id, job_id = _ran(api)
    busy, _ = _ran(api)
    assert api.submit(busy).status_code == 201  # queued: its records stay
    never = api.upload()["id"]  # no job ever: no "last job" to count from
    ledger = _ledger(api, dataset_id)
    reaper = Reaper(api.url, LeaseConfig(retention_days=30))
    assert reaper.expire_once(at=now() + timedelta(days=29)) == []  # not yet
    assert reaper.expire_once(at=now() + timedelta(days=31)) == [dataset_id]
    assert reaper.expire_once(at=now() + timedelta(days=32)) == []  # once

    with session_scope(api.url) as session:
        assert record_count(session, dataset_id) == 0
        assert record_count(session, busy) > 0 and record_count(session, never) > 0
        row = session.get(Dataset, dataset_id)
        assert row is not None and row.records_dropped_at is not None and row.deleted_at is None
    assert not (record_keys.current().folder / f"{dataset_id}.key").exists()
    assert (record_keys.current().folder / f"{busy}.key").exists()
    assert _ledger(api, dataset_id) == ledger  # the ledger is kept

    shown = api.client.get(f"/v1/datasets/{dataset_id}", headers=auth(api.admin)).json()
    assert shown["records_dropped_at"] and shown["deleted_at"] is None
    budget = api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
    assert budget.status_code == 200 and budget.json()["history"]
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    prompt = api.client.get(f"/v1/prompts/{job['prompt_id']}", headers=auth(api.reader))
    assert prompt.status_code == 200  # the prompt (a DP output) is kept

    refused = api.submit(dataset_id)
    assert refused.status_code == 409, refused.text
    error = error_of(refused)
    assert error["code"] == "records_dropped"
    assert "DPSYN_RECORD_RETENTION_DAYS" in error["message"] and MARKER not in refused.text


def test_without_a_period_nothing_is_dropped(api: Api) -> None:
    dataset_id, _ = _ran(api)
    assert Reaper(api.url, LeaseConfig()).expire_once(at=now() + timedelta(days=3650)) == []
    with session_scope(api.url) as session:
        assert record_count(session, dataset_id) > 0


def test_the_admin_command_expires_with_the_setting(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for api in make_api(sqlite_url):
        dataset_id, _ = _ran(api)
        monkeypatch.setenv("DPSYN_DATABASE_URL", api.url)
        with session_scope(api.url) as session:  # its job ended 40 days ago
            for row in session.scalars(select(Job).where(Job.dataset_id == dataset_id)):
                row.finished_at = now() - timedelta(days=40)
        kept = CliRunner().invoke(cli, ["admin", "records", "expire", "--days", "50"])
        assert kept.exit_code == 0, kept.output
        assert "records of 0 dataset(s)" in kept.output
        dropped = CliRunner().invoke(cli, ["admin", "records", "expire", "--days", "30"])
        assert dropped.exit_code == 0, dropped.output
        assert dataset_id in dropped.output
