"""Budgets and job submission: admission, refusals that store nothing, cancellation."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.db.models import Job, LedgerEntry
from app.db.session import session_scope
from app.privacy.unit import DEFAULT_DELTA
from tests.api.conftest import TOY_TASK, Api, auth, error_of, toy_rows


def _counts(url: str) -> tuple[int, int]:
    with session_scope(url) as session:
        jobs = session.scalar(select(func.count()).select_from(Job))
        entries = session.scalar(select(func.count()).select_from(LedgerEntry))
    return jobs, entries


def test_budget_defaults_and_validation(api: Api) -> None:
    dataset = api.upload()
    path = f"/v1/datasets/{dataset['id']}/budget"
    missing = api.client.get(path, headers=auth(api.admin))
    assert missing.status_code == 404 and error_of(missing)["code"] == "no_budget"
    response = api.budget(dataset["id"], 2.5)
    assert response.status_code == 200, response.text
    body = response.json()
    # The public default, never 1/|D| (issue 32): the same for every dataset.
    assert body["epsilon"] == 2.5 and body["delta"] == DEFAULT_DELTA
    assert body["delta_source"] == "default" and body["delta_note"] is None
    assert body["accounting"] == "tight"
    assert body["spent"] == 0 and body["plain_sum"] == 0 and body["remaining"] == 2.5
    assert body["history"] == []
    for payload, field in [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": "inf"}, "epsilon"),
        ({"epsilon": 1, "delta": 1}, "delta"),
        ({"epsilon": 1, "accounting": "loose"}, "accounting"),
        ({}, "epsilon"),
    ]:
        bad = api.client.put(path, json=payload, headers=auth(api.admin))
        assert bad.status_code == 422, payload
        error = error_of(bad)
        assert field in error["message"], error
        assert error["fields"][0]["field"] == field
    paper = api.budget(dataset["id"], 4.0, delta=1e-3, accounting="paper").json()
    assert (paper["epsilon"], paper["delta"], paper["accounting"]) == (4.0, 1e-3, "paper")
    assert paper["delta_source"] == "owner"
    # Jobs on it are refused until the owner declares the counts public: the budget says so.
    assert "counts-public" in paper["accounting_note"]


def test_submit_reserves_commits_then_enqueues(api: Api) -> None:
    dataset = api.upload()
    api.budget(dataset["id"], 3.0)
    response = api.submit(dataset["id"], 1.0)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "queued" and job["dataset_id"] == dataset["id"]
    assert job["epsilon"] == pytest.approx(1.0, rel=1e-2) and job["epsilon"] <= 1.0
    assert job["delta"] == DEFAULT_DELTA  # the budget's
    assert job["counts"] == "released"  # not declared public: planned from the release
    assert job["progress"] == {"done": 0, "total": 2 * 4, "unit": "tokens"}
    assert job["accounting"] == "tight" and job["shots"] == 2 and job["prompt_id"] is None
    assert api.queue.enqueued == [job["id"]]  # RecordingQueue checked it was committed first
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row.config["synthesis"]["method"] == "tang"
        # no exact size is stored: the planned sizes are the release's estimates (issue 41)
        assert row.config["plan"]["M"] == 2 and "sizes" not in row.config
        assert set(row.config["planned_sizes"]) == {"w5", "w7"}
        assert row.config["synthesis"]["public_counts"] is False
        assert row.config["plan"]["count_sigma"] is None  # the job releases no count itself
        assert row.config["count_release"] == job["count_release_id"] is not None
        assert sorted(row.schedule) == ["w5", "w7"] and row.event["type"] == "synthesis"
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    body = budget.json()
    # the dataset's count release, charged once, and the job, composed after it
    [release] = body["count_releases"]
    assert release["id"] == job["count_release_id"] and release["share"] == pytest.approx(
        0.05, rel=1e-3
    )
    assert body["counts_epsilon"] == release["epsilon"]
    # (the tight composition: the job at the budget's delta less the release's, a little above
    # its own; the ledger's one-batch rule composes it at half the budget's delta)
    assert body["composed"] == pytest.approx(job["epsilon"] + release["epsilon"], rel=1e-2)
    assert body["composed"] >= job["epsilon"] + release["epsilon"]
    assert body["rule"] == "one_batch" and body["spent"] > body["composed"]
    assert body["remaining"] == pytest.approx(3.0 - body["spent"])
    assert body["live_jobs"] == 1
    counts, entry = body["history"]
    assert counts["kind"] == "counts" and counts["count_release_id"] == release["id"]
    assert entry["kind"] == "reserve" and entry["job_id"] == job["id"]
    assert entry["count_release_id"] is None
    assert entry["event"]["type"] == "synthesis" and entry["created_at"].endswith("Z")
    listed = api.client.get("/v1/jobs", headers=auth(api.admin)).json()
    assert [j["id"] for j in listed] == [job["id"]]
    filtered = api.client.get("/v1/jobs?status=succeeded", headers=auth(api.admin)).json()
    assert filtered == []
    got = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert got == job


def test_over_budget_is_409_with_remaining_and_stores_nothing(api: Api) -> None:
    # Counts declared public: both jobs price the same exact counts, so their composition is
    # known to pass the budget (with released counts each job is priced at noisy counts).
    # (Two such jobs compose to 1.30 at the default delta 1e-6.)
    dataset = api.upload(counts_public=True)
    api.budget(dataset["id"], 1.25)
    first = api.submit(dataset["id"], 1.0).json()
    before = _counts(api.url)
    for epsilon in (1.0, 2.0):  # 2.0: refused before planning (more than the whole budget)
        response = api.submit(dataset["id"], epsilon)
        assert response.status_code == 409, response.text
        error = error_of(response)
        assert error["code"] == "budget_exceeded"
        assert error["total"] == 1.25
        assert error["remaining"] == pytest.approx(1.25 - error["spent"])
        shown = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
        assert error["spent"] == pytest.approx(shown.json()["spent"], rel=1e-9)
        assert error["spent"] > first["epsilon"]  # alone: composed at half the delta
        assert "remaining" in error["message"]
    assert _counts(api.url) == before
    assert api.queue.enqueued == [first["id"]]
    # Lowering the budget below what is spent is refused too.
    lower = api.budget(dataset["id"], 0.5)
    assert lower.status_code == 409 and error_of(lower)["code"] == "budget_below_spent"
    switch = api.budget(dataset["id"], 5.0, accounting="paper")
    assert switch.status_code == 409 and error_of(switch)["code"] == "accounting_locked"
    assert api.budget(dataset["id"], 5.0).json()["remaining"] > 3.9


def test_refused_submissions(api: Api) -> None:
    dataset = api.upload()
    no_budget = api.submit(dataset["id"])
    assert no_budget.status_code == 409 and error_of(no_budget)["code"] == "no_budget"
    api.budget(dataset["id"], 3.0)
    cases = [
        ({"epsilon": 0}, 422, "epsilon"),
        ({"method": "magic"}, 422, "method"),
        ({"shots": 0}, 422, "shots"),
        ({"params": {"M": 0}}, 422, "M"),
        ({"params": {"seed": 1}}, 422, "seed"),
        ({"params": {"variant": "bogus"}}, 422, "variant"),
        ({"accounting": "paper"}, 422, "accounting"),
        ({"delta": 0.5}, 422, "delta"),
        ({"dataset_id": "nope"}, 404, "nope"),
    ]
    for overrides, status, word in cases:
        body = {"dataset_id": dataset["id"], "epsilon": 1.0, **overrides}
        response = api.submit(**body)
        assert response.status_code == status, (overrides, response.text)
        assert word in error_of(response)["message"], (overrides, response.text)
    infinite = api.client.post(
        "/v1/jobs",
        content=f'{{"dataset_id": "{dataset["id"]}", "epsilon": 1e999}}',
        headers={**auth(api.admin), "Content-Type": "application/json"},
    )
    assert infinite.status_code == 422 and "epsilon" in error_of(infinite)["message"]
    assert _counts(api.url) == (0, 0)


def test_jobs_that_cannot_be_planned_are_422(api: Api) -> None:
    # Counts declared public: a label without records is known to be empty (released counts
    # are never 0, so an undeclared dataset's job runs with empty teachers instead).
    # (A file of one label is refused at upload: a third label without records, then.)
    task = {**TOY_TASK, "labels": ["w5", "w7", "w9"]}
    one_empty = api.upload(toy_rows(), task=task, counts_public=True)
    api.budget(one_empty["id"], 3.0)
    response = api.submit(one_empty["id"])
    assert response.status_code == 422
    assert "no private records with label(s) w9" in error_of(response)["message"]
    dataset = api.upload(counts_public=True)  # paper accounting needs the counts public
    api.budget(dataset["id"], 3.0, accounting="paper")
    too_big = api.submit(dataset["id"], params={"M": 10, "N": 2, "tmax": 1})  # 20 > 12 records
    assert too_big.status_code == 422, too_big.text
    assert _counts(api.url) == (0, 0)


def test_calibration_failure_is_422_naming_what_to_change(api: Api) -> None:
    dataset = api.upload()
    api.budget(dataset["id"], 3.0)
    response = api.submit(
        dataset["id"],
        0.05,
        method="adadpsyn",
        params={"M": 2, "N": 1, "tmax": 1, "K": 8, "variant": "paper", "sigma0": 2, "sigma2": 2},
    )
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "cannot_plan" and "cannot be met" in error["message"]
    # the plan read the dataset's count release, drawn and charged for it: the only entry
    assert _counts(api.url) == (0, 1)


def test_cancel_a_queued_job_releases_its_reservation(api: Api) -> None:
    dataset = api.upload()
    api.budget(dataset["id"], 3.0)
    job = api.submit(dataset["id"]).json()
    response = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin))
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "cancelled" and body["cancel_requested"] is True
    assert body["finished_at"] is not None
    again = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin))
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    body = budget.json()
    # the job is given back; the count release its plan drew stays charged (the dataset's)
    assert body["spent"] == body["counts_epsilon"] > 0 and body["live_jobs"] == 0
    assert [e["kind"] for e in body["history"]] == ["counts", "reserve", "release"]


def test_cancel_a_running_job_flags_it_for_the_worker(api: Api) -> None:
    dataset = api.upload()
    api.budget(dataset["id"], 3.0)
    job = api.submit(dataset["id"]).json()
    with session_scope(api.url) as session:
        session.get(Job, job["id"]).status = "running"
    response = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin))
    body = response.json()
    assert body["status"] == "running" and body["cancel_requested"] is True
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    kinds = [e["kind"] for e in budget.json()["history"]]
    assert kinds == ["counts", "reserve"]  # the worker decides


def test_a_job_the_queue_refuses_fails_and_is_released(api: Api) -> None:
    dataset = api.upload()
    api.budget(dataset["id"], 3.0)
    api.queue.fail = True
    response = api.submit(dataset["id"])
    assert response.status_code == 503 and error_of(response)["code"] == "queue_unavailable"
    [job] = api.client.get("/v1/jobs", headers=auth(api.admin)).json()
    assert job["status"] == "failed" and "could not be queued" in job["error"]
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    assert budget.json()["spent"] == budget.json()["counts_epsilon"]  # the job's given back


def test_other_tenants_cannot_see_submit_or_cancel_jobs(api: Api) -> None:
    dataset = api.upload()
    api.budget(dataset["id"], 3.0)
    job = api.submit(dataset["id"]).json()
    other = auth(api.other)
    assert api.client.get("/v1/jobs", headers=other).json() == []
    for response in (
        api.client.get(f"/v1/jobs/{job['id']}", headers=other),
        api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=other),
        api.submit(dataset["id"], key=api.other),
    ):
        assert response.status_code == 404, response.text
    still = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert still["status"] == "queued"
