"""Budgets follow the records (issue 51, item 4; docs/privacy.md): a tenant's records
uploaded again are refused unless linked to the budget they already charge, on SQLite and on
PostgreSQL; the fingerprints are keyed, and their key never leaves the server."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.db.models import Dataset, DatasetRecord, RecordFingerprint
from app.db.session import session_scope
from app.services.fingerprints import fingerprint, normalise
from tests.api.conftest import TOY_TASK, Api, auth, csv_bytes, error_of, make_api, toy_rows

KEY = "fingerprint-key-of-the-api-tests-0123456789abcdef"


@pytest.fixture(params=["sqlite", "postgres"])
def any_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    yield from make_api(url, fingerprint_key=KEY)


@pytest.fixture
def pg_api(postgres_url: str) -> Iterator[Api]:
    yield from make_api(postgres_url, fingerprint_key=KEY)


def _post(api: Api, rows: list[dict], **fields: object):
    body = {"task": TOY_TASK, "records": rows, **fields}
    return api.client.post("/v1/datasets", json=body, headers=auth(api.admin))


def _stored(api: Api) -> tuple[int, int, int]:
    with session_scope(api.url) as session:
        return tuple(  # type: ignore[return-value]
            session.scalar(select(func.count()).select_from(table)) or 0
            for table in (Dataset, DatasetRecord, RecordFingerprint)
        )


def _seen(response, first: str, count: int) -> None:
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "records_seen"
    assert error["datasets"] == {first: count}
    assert first in error["message"] and f"{count} record" in error["message"]
    assert "budget_of" in error["message"]


def test_the_same_file_again_is_refused_and_stores_nothing(any_api: Api) -> None:
    api = any_api
    rows = toy_rows()
    first = api.upload(rows)
    before = _stored(api)
    again = api.client.post(  # the same records as a file
        "/v1/datasets",
        files={"file": ("toy.csv", csv_bytes(rows), "text/csv")},
        data={"task": json.dumps(TOY_TASK)},
        headers=auth(api.admin),
    )
    _seen(again, first["id"], len(rows))
    _seen(_post(api, rows), first["id"], len(rows))  # as JSON too
    assert _stored(api) == before  # nothing stored by a refusal


def test_one_new_record_does_not_make_them_new(any_api: Api) -> None:
    api = any_api
    rows = toy_rows()
    first = api.upload(rows)
    more = [*rows, {"text": "PRIVATEMARKER-w5-new what is it", "label": "w5"}]
    _seen(_post(api, more), first["id"], len(rows))
    # nor a corrected label, nor other whitespace or another Unicode form of the same text
    relabelled = [{**r, "label": "w7"} for r in rows[:3]]
    _seen(_post(api, relabelled), first["id"], 3)
    spaced = [{"text": "  " + r["text"].replace(" ", "\t \n") + " ", "label": r["label"]}
              for r in rows[:2]]  # fmt: skip
    _seen(_post(api, spaced), first["id"], 2)


def test_a_deleted_dataset_keeps_its_records_budget(any_api: Api) -> None:
    api = any_api
    rows = toy_rows()
    first = api.upload(rows)
    assert api.client.delete(f"/v1/datasets/{first['id']}", headers=auth(api.admin)).is_success
    with session_scope(api.url) as session:  # the records went, their fingerprints did not
        kept = select(func.count()).where(RecordFingerprint.dataset_id == first["id"])
        assert session.scalar(kept) == len(rows)
    _seen(_post(api, rows), first["id"], len(rows))
    linked = _post(api, rows, budget_of=first["id"])  # the deleted dataset's budget: by ID
    assert linked.status_code == 201, linked.text
    assert linked.json()["budget_dataset_id"] == first["id"]


def test_another_tenant_may_upload_the_same_records(any_api: Api) -> None:
    rows = toy_rows()
    any_api.upload(rows)
    any_api.upload(rows, key=any_api.other)


def test_records_of_two_budgets_cannot_be_linked(any_api: Api) -> None:
    api = any_api
    a, b = toy_rows(), toy_rows()
    first, second = api.upload(a), api.upload(b)
    both = _post(api, [*a[:2], *b[:3]], budget_of=first["id"])
    assert both.status_code == 409, both.text
    error = error_of(both)
    assert error["code"] == "records_span_budgets"
    assert error["datasets"] == {first["id"]: 2, second["id"]: 3}
    wrong = _post(api, b[:2], budget_of=first["id"])  # b's records charge b's budget
    assert wrong.status_code == 409 and error_of(wrong)["code"] == "records_seen"


def test_a_link_names_the_root_owner_and_may_pool(any_api: Api) -> None:
    api = any_api
    rows = toy_rows()
    first = api.upload(rows)
    second = _post(api, rows, budget_of=first["id"]).json()
    third = _post(api, [*rows, *toy_rows(2)], budget_of=second["id"])  # never a chain
    assert third.status_code == 201, third.text
    assert third.json()["budget_dataset_id"] == first["id"]
    pooled = _post(api, toy_rows(), budget_of=first["id"])  # no shared record: allowed
    assert pooled.status_code == 201 and pooled.json()["budget_dataset_id"] == first["id"]
    public = api.upload_public()
    refused = _post(api, toy_rows(), budget_of=public["id"])
    assert refused.status_code == 422 and "budget_of" in error_of(refused)["message"]
    other = _post(api, toy_rows(), budget_of=api.upload(toy_rows(), key=api.other)["id"])
    assert other.status_code == 404  # another tenant's dataset is not found


def test_a_linked_dataset_charges_the_owners_budget(pg_api: Api) -> None:
    """Real PostgreSQL: a budget nearly spent on dataset 1 refuses a job on dataset 2 that a
    fresh budget would admit; the owner's ledger holds dataset 2's entries under its ID.
    (Counts declared public: no count release is drawn, so only the jobs are charged.)"""
    api = pg_api
    rows = toy_rows()
    first = api.upload(rows, counts_public=True)
    assert api.budget(first["id"], 3.0).status_code == 200
    assert api.submit(first["id"], 1.5).status_code == 201
    second = _post(api, rows, budget_of=first["id"], counts_public=True).json()
    shared = api.budget(second["id"], 10.0)
    assert shared.status_code == 409 and error_of(shared)["code"] == "budget_shared"
    assert first["id"] in error_of(shared)["message"]
    refused = api.submit(second["id"], 2.0)  # alone it would fit; after the first, not
    assert refused.status_code == 409, refused.text
    assert error_of(refused)["code"] == "budget_exceeded"
    fresh = api.upload(toy_rows(), counts_public=True)  # on a budget of its own, it fits
    assert api.budget(fresh["id"], 3.0).status_code == 200
    assert api.submit(fresh["id"], 2.0).status_code == 201
    small = api.submit(second["id"], 0.1)  # what the shared budget has left is admitted
    assert small.status_code == 201, small.text
    budget = api.client.get(f"/v1/datasets/{second['id']}/budget", headers=auth(api.admin))
    owner = api.client.get(f"/v1/datasets/{first['id']}/budget", headers=auth(api.admin))
    assert budget.json()["dataset_id"] == first["id"]  # whose budget it is
    assert budget.json()["spent"] == owner.json()["spent"] > 1.5
    assert budget.json()["live_jobs"] == owner.json()["live_jobs"] == 2
    assert budget.json()["linked_datasets"] == owner.json()["linked_datasets"] == [second["id"]]
    entries = {e["job_id"]: e["dataset_id"] for e in owner.json()["history"]}
    assert entries[small.json()["id"]] == second["id"]
    # leave the session's database with no budget past its threshold (the org tests count
    # every tenant's alerting budgets)
    assert api.budget(first["id"], 100.0).status_code == 200


def test_the_fingerprint_is_keyed_and_normalised() -> None:
    text = "Cafe\u0301  where is it ?\n"
    one, two = fingerprint(b"k" * 32, text), fingerprint(b"j" * 32, text)
    assert one != two
    for plain in (text, normalise(text)):
        assert one != hashlib.sha256(plain.encode()).hexdigest()
    assert normalise(text) == "Caf\u00e9 where is it ?"
    assert fingerprint(b"k" * 32, "Café where is it ?") == one
    assert fingerprint(b"k" * 32, "café where is it ?") != one  # case is kept


def test_no_stored_fingerprint_is_a_plain_hash(any_api: Api) -> None:
    rows = toy_rows()
    dataset = any_api.upload(rows)
    with session_scope(any_api.url) as session:
        mine = RecordFingerprint.dataset_id == dataset["id"]
        stored = set(session.scalars(select(RecordFingerprint.fingerprint).where(mine)))
    assert len(stored) == len(rows)
    plain = {hashlib.sha256(normalise(r["text"]).encode()).hexdigest() for r in rows}
    plain |= {hashlib.sha256(r["text"].encode()).hexdigest() for r in rows}
    assert not stored & plain
    assert stored == {fingerprint(KEY.encode(), r["text"]) for r in rows}


def test_the_key_never_leaves_the_server(any_api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rows = toy_rows()
    first = any_api.upload(rows)
    _post(any_api, rows)
    _post(any_api, rows, budget_of=first["id"])
    any_api.client.get("/v1/datasets", headers=auth(any_api.admin))
    any_api.client.get("/openapi.json")
    assert not [body for body in any_api.client.bodies if KEY in body]
    assert KEY not in caplog.text


def test_dpsyn_serve_keeps_a_key_beside_the_admin_key(tmp_path: Path) -> None:
    from app.cli.serve import FINGERPRINT_KEY_FILE, prepare
    from app.settings import Settings

    data = tmp_path / ".dpsyn"
    url = f"sqlite:///{tmp_path / 'dpsyn.db'}"
    settings, _ = prepare(Settings(database_url=url), data_dir=data, migrate=True)
    path = data / FINGERPRINT_KEY_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert settings.fingerprint_key is not None
    key = settings.fingerprint_key.get_secret_value()
    assert len(key) >= 32 and path.read_text().strip() == key
    again, _ = prepare(Settings(database_url=url), data_dir=data, migrate=False)
    assert again.fingerprint_key is not None and again.fingerprint_key.get_secret_value() == key


def test_the_fleet_view_shows_who_shares_a_budget(any_api: Api) -> None:
    """The privacy officer's view (an org:read key): each row names its budget's owner, and
    the owner's row the datasets sharing it; the dashboard's fleet page says the same."""
    from app.db.models import KeyScope
    from app.services.tenants import create_api_key

    api = any_api
    rows = toy_rows()
    first = api.upload(rows)
    assert api.budget(first["id"], 3.0).status_code == 200
    second = _post(api, rows, budget_of=first["id"]).json()
    with session_scope(api.url) as session:
        tenant = session.get(Dataset, first["id"]).tenant_id  # type: ignore[union-attr]
        _, org = create_api_key(session, tenant, KeyScope.ORG_READ)
    listed = api.client.get("/v1/budgets?all_tenants=true", headers=auth(org))
    assert listed.status_code == 200, listed.text
    by_id = {row["dataset_id"]: row for row in listed.json()}
    assert by_id[first["id"]]["budget_dataset_id"] == first["id"]
    assert by_id[first["id"]]["linked_datasets"] == [second["id"]]
    assert by_id[second["id"]]["budget_dataset_id"] == first["id"]
    from app.api.routes.ui.fleet import fleet_table

    with session_scope(api.url) as session:
        table = fleet_table(session, {})
        shown = {r["dataset_id"]: r for r in table.rows}
    assert shown[second["id"]]["budget_owner"] == first["id"]
    assert shown[first["id"]]["linked"] == [second["id"]]
