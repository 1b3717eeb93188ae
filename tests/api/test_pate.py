"""Public datasets and PromptPATE jobs through the API: uploads, refusals that store nothing,
admission against the budget, and a job run by the real runner with the fake backend."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from app.db.models import Budget, DatasetRecord, Job, LedgerEntry
from app.db.session import session_scope
from app.privacy.unit import DEFAULT_DELTA
from app.services.datasets import load_records, record_count
from tests.api.conftest import (
    MARKER,
    PATE_PARAMS,
    PUBLIC,
    TEST_READER,
    Api,
    auth,
    error_of,
    public_rows,
)
from tests.synthesis.fake_backend import FakeBackend


def counts(url: str) -> tuple[int, int, int]:
    with session_scope(url) as session:
        return (
            session.scalar(select(func.count()).select_from(Job)) or 0,
            session.scalar(select(func.count()).select_from(LedgerEntry)) or 0,
            session.scalar(select(func.count()).select_from(Budget)) or 0,
        )


def no_public_text(api: Api) -> None:
    leaked = [body[:200] for body in api.client.bodies if PUBLIC in body]
    assert not leaked, f"public record text in responses: {leaked}"


def test_public_upload_json_and_file_text_column_only(api: Api) -> None:
    created = api.upload_public()
    assert created["kind"] == "public" and created["record_count"] == 40
    assert created["label_counts"] == {} and created["task"] == {}
    assert created["name"] == "public"
    with session_scope(api.url) as session:
        labels = {record.label for record in load_records(session, created["id"], TEST_READER)}
    assert labels == {""}  # the file's label column was ignored
    private = api.upload()
    assert private["kind"] == "private"

    lines = "\n".join(json.dumps({"review": r["text"], "label": 1}) for r in public_rows(6))
    from_file = api.client.post(
        "/v1/datasets",
        files={"file": ("imdb.jsonl", lines.encode(), "application/x-ndjson")},
        data={"public": "true", "text_column": "review", "task": "sst2"},
        headers=auth(api.admin),
    )
    assert from_file.status_code == 201, from_file.text
    body = from_file.json()
    assert body["kind"] == "public" and body["record_count"] == 6 and body["name"] == "imdb"
    assert body["task"]["name"] == "sst2" and body["label_counts"] == {}
    listed = api.client.get("/v1/datasets", headers=auth(api.admin)).json()
    assert sorted(d["kind"] for d in listed) == ["private", "public", "public"]
    got = api.client.get(f"/v1/datasets/{created['id']}", headers=auth(api.admin)).json()
    assert got == created
    no_public_text(api)


def test_public_upload_errors_name_the_problem(api: Api) -> None:
    no_column = api.client.post(
        "/v1/datasets",
        json={"public": True, "text_column": "review", "records": public_rows(3)},
        headers=auth(api.admin),
    )
    assert no_column.status_code == 422
    assert "no field 'review'" in error_of(no_column)["message"]
    empty = api.client.post(
        "/v1/datasets",
        json={"public": True, "records": [{"text": " "}]},
        headers=auth(api.admin),
    )
    assert empty.status_code == 422 and "empty" in error_of(empty)["message"]
    no_task = api.client.post(
        "/v1/datasets", json={"records": public_rows(3)}, headers=auth(api.admin)
    )
    assert no_task.status_code == 422
    assert "task: required for a private dataset" in error_of(no_task)["message"]
    with session_scope(api.url) as session:
        assert session.scalar(select(func.count()).select_from(DatasetRecord)) == 0
    no_public_text(api)


def test_a_public_dataset_takes_no_budget_and_is_never_a_jobs_private_data(api: Api) -> None:
    public = api.upload_public()
    refused = api.budget(public["id"], 5.0)
    assert refused.status_code == 409
    error = error_of(refused)
    assert error["code"] == "public_dataset" and "never charged" in error["message"]
    shown = api.client.get(f"/v1/datasets/{public['id']}/budget", headers=auth(api.admin))
    assert shown.status_code == 404 and "public" in error_of(shown)["message"]
    for response in (
        api.submit(public["id"]),  # tang on public data
        api.submit_pate(public["id"], public["id"]),
    ):
        assert response.status_code == 422, response.text
        error = error_of(response)
        assert error["code"] == "public_dataset"
        assert error["message"].startswith(f"dataset_id: dataset '{public['id']}' is public")
    assert counts(api.url) == (0, 0, 0)


def test_promptpate_submissions_that_cannot_run_are_refused_and_store_nothing(
    api: Api,
) -> None:
    private = api.upload()
    api.budget(private["id"], 10.0)
    public = api.upload_public()
    other_private = api.upload()
    theirs = api.upload_public(key=api.other)
    gone = api.upload_public()
    assert api.client.delete(f"/v1/datasets/{gone['id']}", headers=auth(api.admin)).is_success
    before = counts(api.url)
    cases = [
        ({"public_dataset_id": None}, 422, "public_dataset_id: required for method promptpate"),
        ({"method": "tang"}, 422, "public_dataset_id: only method promptpate"),
        ({"public_dataset_id": other_private["id"]}, 422, "is private"),
        ({"public_dataset_id": private["id"]}, 422, "is private"),
        ({"public_dataset_id": theirs["id"]}, 404, f"dataset '{theirs['id']}' not found"),
        ({"public_dataset_id": "nope"}, 404, "public_dataset_id: dataset 'nope' not found"),
        ({"public_dataset_id": gone["id"]}, 409, "was deleted"),
        ({"params": {**PATE_PARAMS, "teachers": 0}}, 422, "teachers"),
        (
            {"params": {**PATE_PARAMS, "M": 4}},
            422,
            "params.M: a parameter of method tang or adadpsyn, not of method promptpate",
        ),
        ({"params": {**PATE_PARAMS, "bogus": 1}}, 422, "params.bogus"),
        ({"params": {**PATE_PARAMS, "seed": 1}}, 422, "params.seed"),
        ({"params": {**PATE_PARAMS, "sigma_threshold": 2.0}}, 422, "given together"),
        ({"params": {**PATE_PARAMS, "queries": 2}}, 422, "student prompt of 2 shots"),
        ({"accounting": "paper"}, 422, "accounting"),
        ({"epsilon": 50.0}, 409, "remaining"),
    ]
    for overrides, status, words in cases:
        body = {"public_dataset_id": public["id"], **overrides}
        response = api.submit_pate(private["id"], **body)
        assert response.status_code == status, (overrides, response.text)
        assert words in error_of(response)["message"], (overrides, response.text)
    private_as_public = api.submit_pate(private["id"], other_private["id"])
    assert error_of(private_as_public)["code"] == "not_public"
    # token-loop methods refuse PromptPATE parameters, naming them
    mixed = api.submit(private["id"], params={"M": 2, "N": 1, "tmax": 4, "teachers": 3})
    assert mixed.status_code == 422
    assert "params.teachers: a parameter of method promptpate" in error_of(mixed)["message"]
    assert counts(api.url) == before
    assert api.queue.enqueued == []


def test_promptpate_admission_reserves_its_event_and_composes_with_other_jobs(api: Api) -> None:
    private = api.upload()
    api.budget(private["id"], 4.0)  # 3 (+) 1 = 3.2 fits; 3 (+) 1 (+) 3 = 4.6 does not
    public = api.upload_public()
    response = api.submit_pate(
        private["id"], public["id"], params={**PATE_PARAMS, "max_public": 30}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["method"] == "promptpate" and job["public_dataset_id"] == public["id"]
    assert job["status"] == "queued" and job["shots"] == 2 and job["accounting"] == "tight"
    # min(max_public, 40 public texts)
    assert job["progress"] == {"done": 0, "total": 30, "unit": "public inputs"}
    assert job["epsilon"] == pytest.approx(3.0, rel=1e-2) and job["epsilon"] <= 3.0
    assert job["delta"] == DEFAULT_DELTA and job["stats"] is None  # the budget's, public
    assert api.queue.enqueued == [job["id"]]
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        # PromptPATE reads no private count (issue 41): none is stored, none released
        assert row.config["sizes"] == {"private": 0, "public": 40}
        assert row.config["pate"]["teachers"] == 4 and row.config["pate"]["student_shots"] == 2
        assert row.config["pate"]["seed"] is None and row.event["type"] == "pate"
    budget = api.client.get(f"/v1/datasets/{private['id']}/budget", headers=auth(api.admin))
    body = budget.json()
    [entry] = body["history"]
    assert entry["kind"] == "reserve" and entry["event"]["type"] == "pate"
    assert body["composed"] == pytest.approx(job["epsilon"], rel=1e-3)
    assert body["rule"] == "one_batch" and body["spent"] > body["composed"]  # at half the delta

    assert body["count_releases"] == []  # PromptPATE draws no count release

    tang = api.submit(private["id"], 1.0)  # a token-loop job on the same budget
    assert tang.status_code == 201, tang.text
    both = api.client.get(f"/v1/datasets/{private['id']}/budget", headers=auth(api.admin))
    spent = both.json()["spent"]
    # the token-loop job's plan drew the dataset's count release, charged once beside it
    counts_epsilon = both.json()["counts_epsilon"]
    assert counts_epsilon == pytest.approx(0.05 * 4.0, rel=1e-3)
    assert job["epsilon"] + counts_epsilon < spent
    assert spent <= job["epsilon"] + tang.json()["epsilon"] + counts_epsilon + 1e-6
    assert both.json()["live_jobs"] == 2
    refused = api.submit_pate(private["id"], public["id"])
    assert refused.status_code == 409
    error = error_of(refused)
    assert error["code"] == "budget_exceeded"
    assert error["remaining"] == pytest.approx(4.0 - spent, rel=1e-6)
    assert counts(api.url)[:2] == (2, 3)  # two jobs; their reserves and the count release


def test_a_promptpate_job_runs_through_the_worker_and_serves_its_prompt(api: Api) -> None:
    private = api.upload()
    api.budget(private["id"], 5.0)
    public = api.upload_public()
    job = api.submit_pate(private["id"], public["id"]).json()
    backend = FakeBackend(stop_after=None)
    api.run_worker(job["id"], backend)

    done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert done["status"] == "succeeded" and done["error"] is None, done
    assert done["progress"]["total"] == 40
    stats = done["stats"]
    assert set(stats) == {
        "processed",
        "answered",
        "rejected",
        "budget_exhausted",
        "spent_mu",
        "budget_mu",
        "holdout_accuracy",
    }
    assert done["progress"]["done"] == 40 and stats["processed"] <= 40  # complete
    assert stats["answered"] + stats["rejected"] == stats["processed"]
    assert stats["answered"] >= 3 and stats["spent_mu"] <= stats["budget_mu"] * (1 + 1e-9)

    # The teachers saw the private records; the result holds public texts only.
    teacher_prompts = [backend.detokenize(p) for _, batch in backend.calls for p in batch]
    assert any(MARKER in prompt for prompt in teacher_prompts)
    prompt = api.client.get(f"/v1/prompts/{done['prompt_id']}", headers=auth(api.reader))
    assert prompt.status_code == 200
    body = prompt.json()
    assert body["method"] == "promptpate" and body["job_id"] == job["id"]
    assert body["epsilon"] == pytest.approx(done["epsilon"]) and body["delta"] == done["delta"]
    assert len(body["demonstrations"]) == 2
    for demo in body["demonstrations"]:
        assert demo["text"].startswith(PUBLIC) and demo["label"] in ("w5", "w7")
    answer = api.client.post(
        f"/v1/prompts/{done['prompt_id']}/complete",
        json={"query": "a b c"},
        headers=auth(api.reader),
    )
    assert answer.status_code == 200 and answer.json()["label"] == "w5"

    budget = api.client.get(f"/v1/datasets/{private['id']}/budget", headers=auth(api.admin))
    history = budget.json()["history"]
    assert [(e["kind"], e["event"]["type"]) for e in history] == [
        ("reserve", "pate"),
        ("commit", "pate"),
    ]
    assert budget.json()["composed"] == pytest.approx(done["epsilon"], rel=1e-3)
    api.run_worker(job["id"], backend)  # a redelivered task changes nothing
    assert len(api.client.get(f"/v1/datasets/{private['id']}/budget", headers=auth(api.admin))
               .json()["history"]) == 2  # fmt: skip


def test_deleting_a_public_dataset_cancels_its_queued_jobs(api: Api) -> None:
    private = api.upload()
    api.budget(private["id"], 5.0)
    public = api.upload_public()
    job = api.submit_pate(private["id"], public["id"]).json()
    deleted = api.client.delete(f"/v1/datasets/{public['id']}", headers=auth(api.admin))
    assert deleted.status_code == 200 and deleted.json()["deleted_at"] is not None
    cancelled = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["error"] == "cancelled: its public dataset was deleted"
    budget = api.client.get(f"/v1/datasets/{private['id']}/budget", headers=auth(api.admin))
    assert [e["kind"] for e in budget.json()["history"]] == ["reserve", "release"]
    assert budget.json()["spent"] == 0
    with session_scope(api.url) as session:
        assert record_count(session, public["id"]) == 0
        assert record_count(session, private["id"]) == 24
