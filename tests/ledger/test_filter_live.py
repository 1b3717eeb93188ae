"""The ledger's filter on live jobs through the API, on PostgreSQL (issue 51).

* Jobs submitted one after another (a team reads each prompt, then picks the next) are
  priced by the Rényi filter: more than the tight composition of the same events, which is
  not valid across adaptively chosen jobs, and at most their plain sum.
* The same jobs declared in one request (``POST /v1/jobs/batch``) are one batch on the ledger
  and priced by the one-batch rule, below the adaptive price.
* A refusal states the spend, the remainder and what the job would add in one currency.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.privacy.accounting import TightPldAccountant
from app.privacy.events import from_dict
from tests.api.conftest import Api, auth, error_of, make_api, toy_rows
from tests.api.test_count_release import _request

EPSILONS = (0.5, 2.0, 5.0)


@pytest.fixture
def pg_api(postgres_url: str) -> Iterator[Api]:
    yield from make_api(postgres_url)


def _dataset(api: Api, budget: float) -> str:
    dataset = api.upload(toy_rows(n_per_label=40))
    assert api.budget(dataset["id"], budget).status_code == 200
    return dataset["id"]


def _budget(api: Api, dataset_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
    assert response.status_code == 200, response.text
    return response.json()


def _job(dataset_id: str, epsilon: float) -> dict[str, Any]:
    return _request(dataset_id, epsilon)


def _independent_composition(body: dict[str, Any]) -> float:
    """The count release's epsilon plus the tight composition of the stored jobs' events at
    the budget's delta less the release's, recomputed from the ledger's history with an
    uncached accountant."""
    events = [from_dict(e["event"]) for e in body["history"] if e["kind"] == "reserve"]
    releases = [e for e in body["history"] if e["kind"] == "counts"]
    delta = body["delta"] - sum(r["delta"] for r in releases)
    return body["counts_epsilon"] + TightPldAccountant(cached=False).dataset_epsilon(events, delta)


def test_adaptive_jobs_are_priced_by_the_filter_between_composition_and_plain_sum(
    pg_api: Api,
) -> None:
    dataset_id = _dataset(pg_api, 20.0)
    for epsilon in EPSILONS:  # one after another: each could depend on the last
        response = pg_api.client.post(
            "/v1/jobs", json=_job(dataset_id, epsilon), headers=auth(pg_api.admin)
        )
        assert response.status_code == 201, response.text
    body = _budget(pg_api, dataset_id)
    composed = _independent_composition(body)
    assert body["composed"] == pytest.approx(composed, rel=1e-6)
    assert body["rule"] == "renyi_filter"
    assert composed < body["spent"] <= body["plain_sum"]
    own = [e["epsilon"] for e in body["history"] if e["kind"] == "reserve"]
    assert own == pytest.approx(list(EPSILONS), rel=1e-2)  # calibrated to at most the target
    assert body["plain_sum"] == pytest.approx(body["counts_epsilon"] + sum(own), rel=1e-9)
    batches = [e["batch"] for e in body["history"] if e["kind"] == "reserve"]
    assert len(set(batches)) == 3  # each its own
    assert body["over_note"] is None


def test_a_declared_batch_is_one_mechanism_and_costs_less(pg_api: Api) -> None:
    adaptive = _dataset(pg_api, 20.0)
    for epsilon in EPSILONS:
        assert (
            pg_api.client.post(
                "/v1/jobs", json=_job(adaptive, epsilon), headers=auth(pg_api.admin)
            ).status_code
            == 201
        )
    declared = _dataset(pg_api, 20.0)
    response = pg_api.client.post(
        "/v1/jobs/batch",
        json={"jobs": [_job(declared, e) for e in EPSILONS]},
        headers=auth(pg_api.admin),
    )
    assert response.status_code == 201, response.text
    jobs = response.json()
    assert [j["epsilon"] for j in jobs] == pytest.approx(list(EPSILONS), rel=1e-2)
    assert {j["id"] for j in jobs} <= set(pg_api.queue.enqueued)  # every job was queued
    body = _budget(pg_api, declared)
    batches = {e["batch"] for e in body["history"] if e["kind"] == "reserve"}
    assert len(batches) == 1 and batches != {jobs[0]["id"]}
    assert body["rule"] == "one_batch"
    assert body["composed"] < body["spent"] < _budget(pg_api, adaptive)["spent"]
    # A job submitted after the batch was chosen after reading it: the Rényi filter again.
    assert (
        pg_api.client.post(
            "/v1/jobs", json=_job(declared, 0.5), headers=auth(pg_api.admin)
        ).status_code
        == 201
    )
    assert _budget(pg_api, declared)["rule"] == "renyi_filter"


def test_a_batch_that_does_not_fit_admits_none_of_its_jobs(pg_api: Api) -> None:
    dataset_id = _dataset(pg_api, 6.0)
    before = _budget(pg_api, dataset_id)
    response = pg_api.client.post(
        "/v1/jobs/batch",
        json={"jobs": [_job(dataset_id, e) for e in (5.0, 5.0, 5.0)]},
        headers=auth(pg_api.admin),
    )
    assert response.status_code == 409, response.text
    assert error_of(response)["code"] == "budget_exceeded"
    after = _budget(pg_api, dataset_id)
    assert (
        [e for e in after["history"] if e["kind"] != "counts"]
        == [e for e in before["history"] if e["kind"] != "counts"]
        == []
    )
    listed = pg_api.client.get(
        "/v1/jobs", params={"dataset_id": dataset_id}, headers=auth(pg_api.admin)
    )
    assert listed.json() == []


def test_a_batch_names_one_dataset_and_at_least_one_job(pg_api: Api) -> None:
    one, two = _dataset(pg_api, 10.0), _dataset(pg_api, 10.0)
    mixed = pg_api.client.post(
        "/v1/jobs/batch",
        json={"jobs": [_job(one, 1.0), _job(two, 1.0)]},
        headers=auth(pg_api.admin),
    )
    assert mixed.status_code == 422, mixed.text
    assert "one dataset" in error_of(mixed)["message"]
    empty = pg_api.client.post("/v1/jobs/batch", json={"jobs": []}, headers=auth(pg_api.admin))
    assert empty.status_code == 422, empty.text


def test_a_refusal_says_remaining_and_what_the_job_adds_in_one_currency(pg_api: Api) -> None:
    dataset_id = _dataset(pg_api, 8.0)
    first = pg_api.client.post("/v1/jobs", json=_job(dataset_id, 6.5), headers=auth(pg_api.admin))
    assert first.status_code == 201, first.text
    refused = pg_api.client.post("/v1/jobs", json=_job(dataset_id, 6.5), headers=auth(pg_api.admin))
    assert refused.status_code == 409, refused.text
    error = error_of(refused)
    body = _budget(pg_api, dataset_id)
    assert error["spent"] == pytest.approx(body["spent"], rel=1e-9)
    assert error["remaining"] == pytest.approx(8.0 - body["spent"], rel=1e-9)
    assert error["adds"] > error["remaining"]  # why it is refused, in the same currency
    assert error["requested"] == pytest.approx(6.5, rel=1e-2)
    message = error["message"]
    assert "remaining" in message and "would add" in message and "own epsilon" in message
