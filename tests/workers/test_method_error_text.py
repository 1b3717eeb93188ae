"""A method's error reaches the job's record, the API and the worker log only once its
message passed the record-text check (issue 52, item 5).

The method is a plug-in (``tests/methods/talkative.py``, registered here with
``registered``) whose run fails in a data check, worded as a careless author would: quoting
the record it refused, whole or in part, in a ``SynthesisError`` (whose message the service
shows) or in a ``ValueError`` (which it names by type only). Each job is submitted through
the REST API and run by the real worker code (``workers.runner.run_job``); then the job as
the API returns it, the rows of the database and everything the worker logged are searched
for the record. A message that quotes no record is shown unchanged (the negative control).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

import pytest

from app.db.models import Job
from app.db.session import session_scope
from app.methods.registry import registered
from app.synthesis.record_text import WITHHELD
from tests.api.conftest import MARKER, TOY_TASK, Api, auth, make_api
from tests.methods.talkative import LONG, PLAIN, TALKATIVE

_UPLOADS = itertools.count()


def _rows() -> list[dict]:
    """Records longer than the plug-in's bound (each its own, per upload): what its data
    check quotes."""
    n = next(_UPLOADS)
    rows = [
        {
            "text": f"{MARKER}-{label}-{i}-{n} which river runs longest through the desert",
            "label": label,
        }
        for label in TOY_TASK["labels"]
        for i in range(12)
    ]
    assert all(len(row["text"]) > LONG for row in rows)
    return rows


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    """An app made while the plug-in is registered (its OpenAPI document names it)."""
    with registered(TALKATIVE):
        yield from make_api(sqlite_url)


def _failed_job(api: Api, monkeypatch: pytest.MonkeyPatch, raises: str) -> tuple[dict, list[dict]]:
    """Run one talkative job that raises ``raises``; the job as the API returns it, and the
    text of the record its run quoted (the first long one, as the run read them)."""
    monkeypatch.setenv("TALKATIVE_RAISES", raises)
    rows = _rows()
    dataset = api.upload(rows)
    assert api.budget(dataset["id"], epsilon=3.0).status_code == 200
    submitted = api.submit(dataset["id"], method="talkative", shots=2, params={})
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    api.run_worker(job_id)
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    assert job["status"] == "failed", job
    return job, rows


@pytest.mark.parametrize("raises", ["synthesis", "window"])
def test_a_method_error_that_quotes_a_record_is_withheld(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, raises: str
) -> None:
    caplog.set_level(logging.DEBUG)
    job, rows = _failed_job(api, monkeypatch, raises)
    assert job["error"] == WITHHELD  # it says why, and names no record and no count
    with session_scope(api.url) as session:
        stored = session.get(Job, job["id"])
        assert stored is not None and stored.error == WITHHELD and stored.touched_data
    logged = caplog.text
    assert "failed with SynthesisError at" in logged and WITHHELD in logged
    for surface in (logged, *api.client.bodies):
        assert MARKER not in surface
        assert not any(row["text"][5:30] in surface for row in rows)
    api.client.assert_no_private_text()


def test_an_error_of_another_kind_is_named_by_its_type(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    job, _ = _failed_job(api, monkeypatch, "value")
    assert job["error"] == f"internal error (ValueError) in job {job['id']}; see the worker log"
    assert "failed with ValueError at" in caplog.text
    assert MARKER not in caplog.text
    api.client.assert_no_private_text()


def test_a_message_that_quotes_no_record_is_shown_as_it_is(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Negative control: the check withholds quotes, not every method message."""
    caplog.set_level(logging.DEBUG)
    job, _ = _failed_job(api, monkeypatch, "plain")
    assert job["error"] == PLAIN
    assert "failed with SynthesisError at" in caplog.text and PLAIN in caplog.text
    assert WITHHELD not in caplog.text
