"""Submission, budgets, cancellation and results against PostgreSQL (row locks, real
transactions). The database is shared by the test run: every check is scoped to this
module's own tenants and datasets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from app.db.models import DatasetRecord, Job, LedgerEntry
from app.db.session import session_scope
from tests.api.conftest import Api, auth, error_of, make_api


@pytest.fixture(scope="module")
def pg_api(postgres_url: str) -> Iterator[Api]:
    yield from make_api(postgres_url)


def _stored(url: str, dataset_id: str) -> tuple[int, int, int]:
    with session_scope(url) as session:
        return tuple(  # type: ignore[return-value]
            session.scalar(select(func.count()).select_from(table).where(column == dataset_id))
            for table, column in (
                (Job, Job.dataset_id),
                (LedgerEntry, LedgerEntry.dataset_id),
                (DatasetRecord, DatasetRecord.dataset_id),
            )
        )


def test_submit_over_budget_cancel_and_finish_on_postgres(pg_api: Api) -> None:
    api = pg_api
    # Counts declared public: two such jobs compose to 1.30 at the default delta, whatever
    # the draw (with released counts, each prices its own noisy counts).
    dataset = api.upload(counts_public=True)
    assert api.budget(dataset["id"], 1.25).status_code == 200
    first = api.submit(dataset["id"], 1.0)
    assert first.status_code == 201, first.text
    job = first.json()
    assert api.queue.enqueued[-1] == job["id"]
    assert _stored(api.url, dataset["id"]) == (1, 1, 24)

    refused = api.submit(dataset["id"], 1.0)
    assert refused.status_code == 409
    error = error_of(refused)
    assert error["code"] == "budget_exceeded"
    assert error["remaining"] == pytest.approx(1.25 - error["spent"])
    assert _stored(api.url, dataset["id"]) == (1, 1, 24)

    cancelled = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin))
    assert cancelled.json()["status"] == "cancelled"
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    assert budget.json()["spent"] == 0

    second = api.submit(dataset["id"], 1.0).json()  # fits again once released
    api.run_job(second["id"])
    done = api.client.get(f"/v1/jobs/{second['id']}", headers=auth(api.admin)).json()
    assert done["status"] == "succeeded" and done["prompt_id"]
    prompt = api.client.get(f"/v1/prompts/{done['prompt_id']}", headers=auth(api.reader))
    assert prompt.status_code == 200
    other = api.client.get(f"/v1/prompts/{done['prompt_id']}", headers=auth(api.other))
    assert other.status_code == 404
    history = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    kinds = [e["kind"] for e in history.json()["history"]]
    assert kinds == ["reserve", "release", "reserve", "commit"]

    deleted = api.client.delete(f"/v1/datasets/{dataset['id']}", headers=auth(api.admin))
    assert deleted.status_code == 200
    assert _stored(api.url, dataset["id"]) == (2, 4, 0)


def test_budget_rules_on_postgres(pg_api: Api) -> None:
    api = pg_api
    dataset = api.upload(counts_public=True)  # paper accounting needs them declared public
    assert api.submit(dataset["id"]).status_code == 409  # no budget
    assert api.budget(dataset["id"], 2.0, accounting="paper").json()["accounting"] == "paper"
    mismatch = api.submit(dataset["id"], accounting="tight")
    assert mismatch.status_code == 422 and "accounting" in error_of(mismatch)["message"]
    job = api.submit(dataset["id"], 1.0)
    assert job.status_code == 201, job.text
    assert api.budget(dataset["id"], 0.5, accounting="paper").status_code == 409
    assert api.budget(dataset["id"], 3.0, accounting="tight").status_code == 409
    assert (
        api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.other)).status_code
        == 404
    )


def test_promptpate_admission_and_run_on_postgres(pg_api: Api) -> None:
    api = pg_api
    dataset = api.upload()
    public = api.upload_public()
    assert public["kind"] == "public"
    assert api.budget(public["id"], 1.0).status_code == 409  # never charged
    assert api.budget(dataset["id"], 4.0).status_code == 200
    private_as_public = api.submit_pate(dataset["id"], dataset["id"])
    assert private_as_public.status_code == 422
    assert error_of(private_as_public)["code"] == "not_public"
    theirs = api.upload_public(key=api.other)
    assert api.submit_pate(dataset["id"], theirs["id"]).status_code == 404
    assert _stored(api.url, dataset["id"]) == (0, 0, 24)

    first = api.submit_pate(dataset["id"], public["id"])
    assert first.status_code == 201, first.text
    job = first.json()
    assert api.queue.enqueued[-1] == job["id"]
    assert job["progress"] == {"done": 0, "total": 40, "unit": "public inputs"}
    refused = api.submit_pate(dataset["id"], public["id"])  # 3 (+) 3 = 4.4 > 4 at delta 1e-6
    assert refused.status_code == 409
    error = error_of(refused)
    assert error["code"] == "budget_exceeded"
    assert error["remaining"] == pytest.approx(4.0 - error["spent"])
    # alone, the job is priced by the one-batch rule: composed at half the budget's delta
    assert job["epsilon"] < error["spent"] < job["epsilon"] * 1.1
    assert _stored(api.url, dataset["id"]) == (1, 1, 24)

    api.run_worker(job["id"])
    done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert done["status"] == "succeeded" and done["stats"]["answered"] >= 3, done
    prompt = api.client.get(f"/v1/prompts/{done['prompt_id']}", headers=auth(api.reader))
    assert prompt.status_code == 200 and prompt.json()["method"] == "promptpate"
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    assert [(e["kind"], e["event"]["type"]) for e in budget.json()["history"]] == [
        ("reserve", "pate"),
        ("commit", "pate"),
    ]
