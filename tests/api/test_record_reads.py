"""Who read what, on SQLite and PostgreSQL: every read of a dataset's records (a job's
worker, an advice run, a validation) is recorded before the records are opened, with the
reader, its process and the count; the owner sees them (route, dashboard), never a record;
a read whose row cannot be written fails and opens nothing."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, text

from app.db.models import Job, RecordRead
from app.db.session import session_scope
from app.services.datasets import load_records
from app.services.record_reads import Reader, ReaderKind
from tests.api.conftest import MARKER, Api, auth, make_api
from tests.api.test_advice import finished, public_labelled, start
from tests.api.test_validation import VALID, upload_validation
from tests.ui.test_pages import sign_in

HERE = f"{socket.gethostname()[:120]}:{os.getpid()}"


@pytest.fixture(params=["sqlite", "postgres"])
def api(request) -> Iterator[Api]:
    url = request.getfixturevalue(f"{request.param}_url")
    yield from make_api(url)


def _funded(api: Api) -> str:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    return dataset["id"]


def _refuse_reads_of(url: str, dataset_id: str) -> None:
    """A trigger that makes the database refuse every read row of the dataset (and of no
    other: the PostgreSQL database is shared by the run's tests)."""
    name = f"refuse_{dataset_id}"
    with session_scope(url) as session:
        if url.startswith("sqlite"):
            session.execute(
                text(
                    f"CREATE TRIGGER {name} BEFORE INSERT ON record_reads "
                    f"WHEN NEW.dataset_id = '{dataset_id}' "
                    "BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            )
            return
        session.execute(
            text(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.dataset_id = '{dataset_id}' THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$"
            )
        )
        session.execute(
            text(
                f"CREATE TRIGGER {name} BEFORE INSERT ON record_reads "
                f"FOR EACH ROW EXECUTE FUNCTION {name}()"
            )
        )


def _reads(api: Api, dataset_id: str, key: str | None = None):
    return api.client.get(f"/v1/datasets/{dataset_id}/reads", headers=auth(key or api.admin))


def test_a_job_run_records_one_read_naming_the_job_and_its_worker(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    assert _reads(api, dataset_id).json() == []  # admitted, not run: nothing read yet
    api.run_job(job["id"])
    response = _reads(api, dataset_id)
    assert response.status_code == 200
    [read] = response.json()
    assert (read["reader_kind"], read["reader_id"], read["record_count"]) == ("job", job["id"], 24)
    assert read["dataset_id"] == dataset_id and read["read_at"]
    assert read["process"].startswith(HERE + ":")  # host:pid, then the attempt's lease token
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row is not None and row.lease_owner in (None, read["process"])
    assert MARKER not in response.text
    # Another tenant's dataset is not found; a prompts:read key cannot read it (as the ledger).
    assert _reads(api, dataset_id, api.other).status_code == 404
    assert _reads(api, dataset_id, api.reader).status_code == 403
    assert _reads(api, "nosuchdataset").status_code == 404


def test_a_read_that_cannot_be_recorded_fails_and_opens_nothing(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    _refuse_reads_of(api.url, dataset_id)
    with pytest.raises(Exception) as raised, session_scope(api.url) as session:
        load_records(session, dataset_id, Reader.of(ReaderKind.JOB, "x"))
    assert MARKER not in str(raised.value)
    api.run_worker(job["id"])  # the job's worker cannot record its read: the job fails
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row is not None and row.status == "failed", (row.status, row.error)
        assert MARKER not in (row.error or "")
        refused = select(func.count()).where(RecordRead.dataset_id == dataset_id)
        assert session.scalar(refused) == 0


def test_a_validation_records_its_read_of_the_validation_set(api: Api) -> None:
    validation = upload_validation(api)
    dataset_id = _funded(api)
    job = api.submit(dataset_id, validation_dataset_id=validation["id"]).json()
    api.run_worker(job["id"])
    [read] = _reads(api, validation["id"]).json()
    assert (read["reader_kind"], read["reader_id"], read["record_count"]) == (
        "validation",
        job["id"],
        4,
    )
    assert read["process"].startswith(HERE + ":")
    [private] = _reads(api, dataset_id).json()
    assert private["reader_kind"] == "job" and private["reader_id"] == job["id"]
    assert VALID not in _reads(api, validation["id"]).text


def test_the_dashboard_shows_the_reads_beside_the_ledger(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    api.run_job(job["id"])
    sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/datasets/{dataset_id}").text
    assert 'id="reads"' in page and page.index('id="ledger"') < page.index('id="reads-table"')
    section = page[page.index('id="reads-table"') :]
    assert job["id"][:12] in section and HERE in section
    assert MARKER not in page


def test_an_advice_run_records_its_read(sqlite_url: str) -> None:
    for api in make_api(sqlite_url):
        dataset_id = public_labelled(api)
        advice = start(api, dataset_id).json()
        assert finished(api, advice["id"])["status"] == "succeeded"
        [read] = _reads(api, dataset_id).json()
        assert (read["reader_kind"], read["reader_id"], read["record_count"]) == (
            "advice",
            advice["id"],
            48,
        )
        assert read["process"].startswith(f"{socket.gethostname()[:30]}:{os.getpid()}:")
        with session_scope(api.url) as session:
            assert session.scalar(select(func.count()).select_from(RecordRead)) == 1
