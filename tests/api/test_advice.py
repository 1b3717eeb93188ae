"""Advice runs through the service (issue 33): ``POST /v1/advice`` on a public labelled
dataset measures the candidates beside zero-shot in the background, spends nothing, refuses
what it cannot run with a 4xx naming the problem, and marks a run a stopped server left
unfinished as failed."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import sessionmaker

from app.db.models import AdviceRun, AdviceStatus, Dataset, LedgerEntry
from app.db.session import get_engine, session_scope
from app.services import advice as advice_service
from app.services.advice import INTERRUPTED
from tests.api.conftest import TOY_TASK, Api, auth, error_of, make_api, toy_rows
from tests.ui.test_pages import sign_in

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
    assert result["summary"].startswith(("Recommended:", "No candidate clearly beats"))
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


# --- queued work, shared by every process (issue 42) -----------------------------------------


@pytest.fixture
def idle_api(sqlite_url: str) -> Iterator[Api]:
    """An API that queues advice but runs none (as when the workers run it)."""
    yield from make_api(sqlite_url, advice_in_api=False)


def _row(api: Api, advice_id: str) -> AdviceRun:
    with session_scope(api.url) as session:
        row = session.get(AdviceRun, advice_id)
        session.expunge(row)
        return row


def test_a_tenant_past_its_share_of_advice_is_answered_429(idle_api: Api):
    """100 runs from one tenant were all accepted in 0.8 s before; now its own share is
    capped, and another tenant is not."""
    api = idle_api
    dataset_id = public_labelled(api)
    accepted = [start(api, dataset_id) for _ in range(3)]
    assert [r.status_code for r in accepted] == [202] * 3
    refused = start(api, dataset_id)
    assert refused.status_code == 429 and error_of(refused)["code"] == "advice_busy"
    assert refused.headers["Retry-After"] == str(advice_service.BUSY_RETRY_AFTER_S)
    theirs = public_labelled(api, key=api.other)
    response = api.client.post(
        "/v1/advice",
        json={"dataset_id": theirs, "methods": ["tang"], "queries": 10, "seeds": 1},
        headers=auth(api.other),
    )
    assert response.status_code == 202, response.text
    # a cancelled run frees its place
    cancelled = api.client.post(
        f"/v1/advice/{accepted[0].json()['id']}/cancel", headers=auth(api.admin)
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert start(api, dataset_id).status_code == 202


def test_runners_take_every_tenants_first_run_before_any_second(idle_api: Api):
    api = idle_api
    mine, theirs = public_labelled(api), public_labelled(api, key=api.other)
    a = [start(api, mine).json()["id"] for _ in range(3)]
    body = {"dataset_id": theirs, "methods": ["tang"], "queries": 10, "seeds": 1}
    b = api.client.post("/v1/advice", json=body, headers=auth(api.other)).json()["id"]
    order = []
    with session_scope(api.url) as session:
        while (claimed := advice_service.claim_next(session, "runner-1")) is not None:
            order.append(claimed)
    assert order == [a[0], b, a[1], a[2]]


def test_a_starting_replica_fails_only_runs_whose_lease_ran_out(idle_api: Api):
    """Before, a second replica starting failed every tenant's runs, and the replica still
    running them then wrote succeeded over the failure."""
    api = idle_api
    dataset_id = public_labelled(api)
    live, lost = (start(api, dataset_id).json()["id"] for _ in range(2))
    sessions = sessionmaker(bind=get_engine(api.url), expire_on_commit=False)
    with sessions() as session:
        assert advice_service.claim_next(session, "replica-1", lease_s=600) == live
        assert advice_service.claim_next(session, "replica-2", lease_s=600) == lost
        session.execute(  # replica-2 died: its lease ran out
            update(AdviceRun)
            .where(AdviceRun.id == lost)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
        session.commit()
    again = next(make_api(api.url, advice_in_api=False))  # another replica starts
    assert _row(again, live).status == "running"
    assert _row(again, lost).status == "failed" and _row(again, lost).error == INTERRUPTED
    # the dead replica's late write changes nothing; the live one's own still lands
    assert not advice_service._owned_write(sessions, lost, "replica-2", status="succeeded")
    assert _row(api, lost).status == "failed"
    assert advice_service._owned_write(sessions, live, "replica-1", progress_done=1)


def _claimed(api: Api) -> tuple[str, sessionmaker]:
    """A new run on a new public dataset, claimed by ``runner-1``, and the sessions to write
    as that runner."""
    advice_id = start(api, public_labelled(api)).json()["id"]
    sessions = sessionmaker(bind=get_engine(api.url), expire_on_commit=False)
    with sessions() as session:
        assert advice_service.claim_next(session, "runner-1") == advice_id
    return advice_id, sessions


def test_a_running_run_is_cancelled_at_its_next_report(idle_api: Api):
    api = idle_api
    advice_id, sessions = _claimed(api)
    response = api.client.post(f"/v1/advice/{advice_id}/cancel", headers=auth(api.admin))
    assert response.status_code == 200 and response.json()["status"] == "running"
    with pytest.raises(advice_service.LostRunError):
        advice_service.renew(sessions, advice_id, "runner-1", 60.0)
    assert _row(api, advice_id).status == "cancelled"
    again = api.client.post(f"/v1/advice/{advice_id}/cancel", headers=auth(api.admin))
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


def test_a_finished_run_cannot_be_cancelled(api: Api):
    advice_id = start(api, public_labelled(api)).json()["id"]
    assert finished(api, advice_id)["status"] == "succeeded"
    response = api.client.post(f"/v1/advice/{advice_id}/cancel", headers=auth(api.admin))
    assert response.status_code == 409 and error_of(response)["code"] == "advice_finished"


def test_the_api_runs_advice_only_when_it_runs_jobs_itself():
    from app.settings import Settings

    assert Settings(database_url="sqlite://").api_runs_advice()  # embedded
    distributed = Settings(database_url="sqlite://", broker_url="redis://127.0.0.1:6379/0")
    assert not distributed.api_runs_advice()  # each worker runs them (workers.celery_app)
    assert Settings(database_url="sqlite://", advice_in_api=False).api_runs_advice() is False


def test_a_run_says_how_long_the_rest_takes_while_it_runs(api: Api, monkeypatch):
    """The time the rest will take, as ``dpsyn advise`` prints it, stored at each change:
    zero-shot's guess, then a prompt run's measure, then nothing once no run is left."""
    said: list[str | None] = []
    write = advice_service._owned_write

    def recorded(sessions, advice_id, owner, **values):
        if "estimate" in values:
            said.append(values["estimate"])
        return write(sessions, advice_id, owner, **values)

    monkeypatch.setattr(advice_service, "_owned_write", recorded)
    body = finished(api, start(api, public_labelled(api)).json()["id"])
    assert body["status"] == "succeeded", body
    assert len(said) == 3 and said[-1] is None, said  # zero-shot, then 2 seeds of tang
    guess, measured = said[:2]
    assert re.fullmatch(r"the rest about .+ \(2 runs\): a guess from zero-shot's time.*", guess)
    assert re.fullmatch(r"the rest about [^:]+ \(1 run\)", measured), measured
    assert body["estimate"] is None and _row(api, body["id"]).estimate is None


def test_a_running_runs_estimate_is_served_and_cleared_when_it_ends(idle_api: Api):
    api = idle_api
    advice_id, sessions = _claimed(api)
    line = "the rest about 2–4 min (5 runs)"
    assert advice_service._owned_write(sessions, advice_id, "runner-1", estimate=line)
    read = api.client.get(f"/v1/advice/{advice_id}", headers=auth(api.admin)).json()
    assert (read["status"], read["estimate"]) == ("running", line)
    sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/advice/{advice_id}").text
    assert re.search(r'id="advice-estimate">([^<]+)<', page).group(1) == line
    advice_service._end(sessions, advice_id, "runner-1", AdviceStatus.FAILED, "stopped")
    read = api.client.get(f"/v1/advice/{advice_id}", headers=auth(api.admin)).json()
    assert (read["status"], read["estimate"]) == ("failed", None)
    assert 'id="advice-estimate"' not in api.client.get(f"/ui/advice/{advice_id}").text
