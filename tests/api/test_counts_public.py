"""Issue 32, the service's half: a private dataset's label counts are private unless its owner
declares them public (an audited opt-in, at upload or later, withdrawable); every job's record
says which it used; paper accounting needs the declaration (a 422 naming it); a budget's delta
is public (the default is the same for every dataset, never 1/|D|, and the owner is warned
when theirs is above 1/|D| or equal to it); and a prompts:read key reads no dataset size."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select

from app.cli.vocabulary import in_cli_words
from app.db.models import Budget, Job, LedgerEntry
from app.db.session import session_scope
from app.privacy.unit import DEFAULT_DELTA
from tests.api.conftest import TOY_TASK, Api, auth, csv_bytes, error_of, toy_rows
from tests.ui.test_pages import key_id_of


def _get(api: Api, path: str, key: str | None = None) -> Any:
    response = api.client.get(path, headers=auth(key or api.admin))
    assert response.status_code == 200, response.text
    return response.json()


def _stored(url: str) -> tuple[int, int]:
    with session_scope(url) as session:
        return session.query(Job).count(), session.query(LedgerEntry).count()


def test_the_opt_in_round_trip_is_audited(api: Api) -> None:
    admin_id = key_id_of(api, api.admin)
    dataset = api.upload()
    assert (dataset["counts_public"], dataset["counts_public_at"], dataset["counts_public_by"]) == (
        False,
        None,
        None,
    )
    declared = api.counts_public(dataset["id"], True)
    assert declared.status_code == 200, declared.text
    body = declared.json()
    assert body["counts_public"] is True and body["counts_public_by"] == admin_id
    at = datetime.fromisoformat(body["counts_public_at"])
    assert body == _get(api, f"/v1/datasets/{dataset['id']}")
    assert [d["counts_public"] for d in _get(api, "/v1/datasets")] == [True]

    # Asking for the current setting again changes nothing, the record included.
    again = api.counts_public(dataset["id"], True).json()
    assert again["counts_public_at"] == body["counts_public_at"]
    withdrawn = api.counts_public(dataset["id"], False).json()
    assert withdrawn["counts_public"] is False and withdrawn["counts_public_by"] == admin_id
    assert datetime.fromisoformat(withdrawn["counts_public_at"]) >= at

    # Only the tenant's admin keys may change it; a public dataset has no counts to declare.
    reader = api.counts_public(dataset["id"], True, key=api.reader)
    assert reader.status_code == 403 and error_of(reader)["code"] == "insufficient_scope"
    assert api.counts_public(dataset["id"], True, key=api.other).status_code == 404
    strict = api.client.put(
        f"/v1/datasets/{dataset['id']}/counts-public",
        json={"public": "yes"},
        headers=auth(api.admin),
    )
    assert strict.status_code == 422
    public = api.upload_public()
    refused = api.counts_public(public["id"], True)
    assert refused.status_code == 409 and error_of(refused)["code"] == "public_dataset"
    assert _get(api, f"/v1/datasets/{dataset['id']}")["counts_public"] is False


def test_uploads_declare_it_by_json_and_by_form(api: Api) -> None:
    admin_id = key_id_of(api, api.admin)
    by_json = api.upload(counts_public=True)
    assert by_json["counts_public"] is True and by_json["counts_public_by"] == admin_id
    assert by_json["counts_public_at"] is not None
    form = api.client.post(
        "/v1/datasets",
        files={"file": ("toy.csv", csv_bytes(toy_rows(3)), "text/csv")},
        data={"task": json.dumps(TOY_TASK), "counts_public": "true"},
        headers=auth(api.admin),
    )
    assert form.status_code == 201, form.text
    assert form.json()["counts_public"] is True and form.json()["counts_public_by"] == admin_id
    # Never on a public upload: it is public whole.
    public = api.client.post(
        "/v1/datasets",
        json={"public": True, "counts_public": True, "records": [{"text": "a"}]},
        headers=auth(api.admin),
    )
    assert public.status_code == 422 and "counts_public" in error_of(public)["message"]


def test_each_job_says_which_counts_it_used(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 10.0).status_code == 200
    released = api.submit(dataset["id"]).json()
    assert released["counts"] == "released" and released["count_release_id"]
    with session_scope(api.url) as session:
        row = session.get(Job, released["id"])
        assert row is not None
        # planned from the dataset's release, charged once in the ledger, not in the job
        assert row.config["count_release"] == released["count_release_id"]
        assert not any(entry.get("count_release") for entry in row.event["labels"])
        kinds = session.scalars(
            select(LedgerEntry.kind)
            .where(LedgerEntry.dataset_id == dataset["id"])
            .order_by(LedgerEntry.id)
        ).all()
        assert kinds == ["counts", "reserve"]

    assert api.counts_public(dataset["id"], True).status_code == 200
    declared = api.submit(dataset["id"]).json()
    assert declared["counts"] == "declared_public" and declared["count_release_id"] is None
    with session_scope(api.url) as session:
        row = session.get(Job, declared["id"])
        assert row is not None
        assert not any(entry.get("count_release") for entry in row.event["labels"])
    # A job admitted before the change keeps what it was planned with.
    assert _get(api, f"/v1/jobs/{released['id']}")["counts"] == "released"

    assert api.counts_public(dataset["id"], False).status_code == 200
    again = api.submit(dataset["id"]).json()
    assert again["counts"] == "released"
    # the same records: the same release, not a second one
    assert again["count_release_id"] == released["count_release_id"]
    assert len(_get(api, f"/v1/datasets/{dataset['id']}/budget")["count_releases"]) == 1
    listed = {j["id"]: j["counts"] for j in _get(api, "/v1/jobs")}
    assert listed[declared["id"]] == "declared_public"


def test_paper_accounting_without_the_opt_in_is_a_422_naming_it(api: Api) -> None:
    dataset = api.upload()
    budget = api.budget(dataset["id"], 10.0, accounting="paper").json()
    route = f"PUT /v1/datasets/{dataset['id']}/counts-public"
    assert route in budget["accounting_note"]  # the owner is told at once
    before = _stored(api.url)
    refused = api.submit(dataset["id"])
    assert refused.status_code == 422, refused.text
    error = error_of(refused)
    assert error["code"] == "counts_not_public"
    assert "label counts declared public" in error["message"] and route in error["message"]
    # A CLI user reads the command that makes the declaration.
    assert f"'dpsyn datasets counts-public {dataset['id']}'" in in_cli_words(error["message"])
    assert _stored(api.url) == before and api.queue.enqueued == []

    assert api.counts_public(dataset["id"], True).status_code == 200
    assert _get(api, f"/v1/datasets/{dataset['id']}/budget")["accounting_note"] is None
    admitted = api.submit(dataset["id"])
    assert admitted.status_code == 201, admitted.text
    assert admitted.json()["counts"] == "declared_public"
    assert api.counts_public(dataset["id"], False).status_code == 200  # withdrawn: refused again
    assert error_of(api.submit(dataset["id"]))["code"] == "counts_not_public"


def test_a_budgets_default_delta_is_public_and_the_owner_is_warned(api: Api) -> None:
    small, large = api.upload(toy_rows(5)), api.upload(toy_rows(400))  # 10 and 800 records
    for dataset in (small, large):
        body = api.budget(dataset["id"], 2.0).json()
        assert body["delta"] == DEFAULT_DELTA  # the same for both: no function of |D|
        assert (body["delta_source"], body["delta_note"]) == ("default", None)

    fine = api.budget(small["id"], 2.0, delta=1e-3).json()  # below 1/10
    assert (fine["delta_source"], fine["delta_note"]) == ("owner", None)
    above = api.budget(small["id"], 2.0, delta=0.2).json()  # above 1/10
    assert above["delta_source"] == "owner"
    assert "above 1/|D| = 0.1" in above["delta_note"] and "10 records" in above["delta_note"]
    # An unset delta keeps the budget's: no budget's delta changes behind its owner's back.
    assert api.budget(small["id"], 3.0).json()["delta"] == 0.2

    # A budget set before issue 32 at the old default 1/|D| keeps it, and is explained.
    with session_scope(api.url) as session:
        row = session.get(Budget, large["id"])
        assert row is not None
        row.delta = 1 / 800
    old = _get(api, f"/v1/datasets/{large['id']}/budget")
    assert old["delta"] == 1 / 800 and old["delta_source"] == "former_default"
    assert "learn the dataset's size" in old["delta_note"]
    assert api.budget(large["id"], 3.0).json()["delta"] == 1 / 800


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


# What a job releases (DP outputs) or names only itself: the rest must be identical.
# the job's own outputs; the notes are a function of its demonstrations (a DP output)
#: The job's own outputs: its noisy demonstrations, and so how many of them were served and
#: left out (``demonstrations_requested`` is the request's, and must match).
_OWN = {"id", "job_id", "dataset_id", "created_at", "demonstrations", "prompt", "epsilon", "notes",
        "demonstrations_served", "demonstrations_dropped"}  # fmt: skip


def test_a_prompt_readers_body_holds_no_dataset_size(api: Api) -> None:
    """Two datasets of different sizes: a prompts:read key's prompt bodies differ only in
    the job's own outputs; the delta is the budget's public one; no number is |D|, a label's
    count, or the inverse of either."""
    bodies, sizes = [], []
    for per_label in (17, 29):
        dataset = api.upload(toy_rows(per_label), name="same name")
        assert api.budget(dataset["id"], 3.0).status_code == 200
        job = api.submit(dataset["id"], 1.0)
        assert job.status_code == 201, job.text
        api.run_job(job.json()["id"])
        prompt_id = _get(api, f"/v1/jobs/{job.json()['id']}")["prompt_id"]
        bodies.append(_get(api, f"/v1/prompts/{prompt_id}", key=api.reader))
        sizes += [per_label, 2 * per_label]
        # a name reaches one live dataset (issue 55): deleted, its name is free again
        assert api.client.delete(
            f"/v1/datasets/{dataset['id']}", headers=auth(api.admin)
        ).is_success
    first, second = ({k: v for k, v in b.items() if k not in _OWN} for b in bodies)
    assert first == second
    for body in bodies:
        assert body["delta"] == DEFAULT_DELTA
        forbidden = [float(n) for n in sizes] + [1 / n for n in sizes]
        found = [n for n in _numbers(body) if any(n == pytest.approx(f) for f in forbidden)]
        assert found == [], found
    listed = _get(api, "/v1/prompts", key=api.reader)
    assert {p["delta"] for p in listed} == {DEFAULT_DELTA}
