"""Advice runs through the service (issue 33): ``POST /v1/advice`` on a public labelled
dataset measures the candidates beside zero-shot in the background, spends nothing, refuses
what it cannot run with a 4xx naming the problem, and marks a run a stopped server left
unfinished as failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from app.db.models import AdviceRun, AdviceStatus, Dataset, LedgerEntry
from app.db.session import session_scope
from app.services.advice import INTERRUPTED
from tests.api.conftest import TOY_TASK, Api, auth, error_of, make_api, toy_rows

FAST = {"tmax": 3, "K": 8, "M": 2, "N": 1}


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def public_labelled(api: Api, n: int = 48, key: str | None = None) -> str:
    rows = [
        {"text": f"ADVICE{i} two three" if i % 2 else f"ADVICE{i} two three four five",
         "label": "w5" if i % 2 else "w7"}
        for i in range(n)
    ]  # fmt: skip
    body = {"public": True, "labelled": True, "task": TOY_TASK, "records": rows}
    response = api.client.post("/v1/datasets", json=body, headers=auth(key or api.admin))
    assert response.status_code == 201, response.text
    return response.json()["id"]


def start(api: Api, dataset_id: str, **body: Any) -> Any:
    payload = {"dataset_id": dataset_id, "methods": ["tang"], "epsilons": [2.0], "seeds": 2,
               "queries": 10, "shots": [2], "params": FAST, **body}  # fmt: skip
    return api.client.post("/v1/advice", json=payload, headers=auth(api.admin))


def finished(api: Api, advice_id: str, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = api.client.get(f"/v1/advice/{advice_id}", headers=auth(api.admin)).json()
        if body["status"] in (AdviceStatus.SUCCEEDED, AdviceStatus.FAILED):
            return body
        time.sleep(0.2)
    raise AssertionError(f"advice {advice_id} did not finish in {timeout_s} s")


def test_an_advice_run_measures_candidates_beside_zero_shot_and_spends_nothing(api: Api):
    dataset_id = public_labelled(api)
    response = start(api, dataset_id)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "queued"
    body = finished(api, response.json()["id"])
    assert body["status"] == "succeeded", body
    result = body["result"]
    assert result["n_queries"] == 10 and result["n_standin"] == 38
    assert [(c["method"], c["shots"], c["epsilon"]) for c in result["candidates"]] == [
        ("tang", 2, 2.0)
    ]
    assert len(result["candidates"][0]["accuracies"]) == 2
    assert 0.0 <= result["zero_shot"] <= 1.0 and 0.5 <= result["majority"] <= 1.0
    assert result["summary"].startswith(("Recommended:", "No candidate beats"))
    assert body["progress_done"] == body["progress_total"] == 3  # zero-shot + 2 seeds
    listed = api.client.get("/v1/advice", headers=auth(api.admin)).json()
    assert [row["id"] for row in listed] == [body["id"]]
    with session_scope(api.url) as session:  # no budget, no ledger entry
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == 0


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("private", 409, "dataset_not_public"),
        ("missing", 404, "not_found"),
        ("small", 422, "dataset_too_small"),
        ("method", 422, "advice_invalid"),
        ("epsilon", 422, None),
    ],
)
def test_what_advice_cannot_run_is_refused_by_name(api: Api, case: str, status: int, code):
    if case == "private":
        response = start(api, api.upload(toy_rows(24))["id"])
    elif case == "missing":
        response = start(api, "nope")
    elif case == "small":
        response = start(api, public_labelled(api, n=12))
    elif case == "method":
        response = start(api, public_labelled(api), methods=["nope"])
    else:
        response = start(api, public_labelled(api), epsilons=[0])
    assert response.status_code == status, response.text
    if code is not None:
        assert error_of(response)["code"] == code
    with session_scope(api.url) as session:  # nothing stored for a refused request
        assert session.scalar(select(func.count()).select_from(AdviceRun)) == 0


def test_another_tenants_advice_is_not_found(api: Api):
    dataset_id = public_labelled(api)
    advice_id = start(api, dataset_id).json()["id"]
    finished(api, advice_id)
    theirs = api.client.get(f"/v1/advice/{advice_id}", headers=auth(api.other))
    assert theirs.status_code == 404
    assert api.client.get("/v1/advice", headers=auth(api.other)).json() == []
    # nor may another tenant run advice on this tenant's dataset
    other = api.client.post("/v1/advice", json={"dataset_id": dataset_id}, headers=auth(api.other))
    assert other.status_code == 404


def test_a_run_left_unfinished_by_a_stopped_server_is_marked_failed(sqlite_url: str):
    apis = make_api(sqlite_url)
    api = next(apis)
    dataset_id = public_labelled(api)
    with session_scope(api.url) as session:  # as a server stopped mid-run leaves it
        row = AdviceRun(
            tenant_id=session.get(Dataset, dataset_id).tenant_id,
            dataset_id=dataset_id,
            config={},
            status=AdviceStatus.RUNNING.value,
            progress_done=1,
            progress_total=3,
        )
        session.add(row)
        session.flush()
        advice_id = row.id
    apis.close()
    again = next(make_api(sqlite_url))  # a new server on the same database
    body = again.client.get(f"/v1/advice/{advice_id}", headers=auth(api.admin)).json()
    assert body["status"] == "failed" and body["error"] == INTERRUPTED
