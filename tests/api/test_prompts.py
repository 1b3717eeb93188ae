"""Finished jobs and their prompts, Stage 2, keys and scopes, health and metrics.

One app and database for the module: two jobs are run to completion (as a worker would,
with the fake backend) and every test reads them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.db.migrate import upgrade
from app.eval.icl import CONTENT_FREE, Score, contextual_calibration, evaluate
from app.llm.base import BackendError, TransientBackendError
from app.llm.retry import RetryPolicy
from app.services import prompts
from app.synthesis.data import Record
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import TaskSpec
from tests.api.conftest import BOOTSTRAP_KEY, MARKER, TOY_TASK, Api, auth, error_of, make_api

METRICS_TOKEN = "metrics-token-of-the-prompt-tests-0123456789"


@dataclass
class World:
    api: Api
    dataset: dict
    job: dict
    prompt_id: str
    x_dataset: dict
    x_prompt_id: str


@pytest.fixture(scope="module")
def world_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    url = f"sqlite:///{tmp_path_factory.mktemp('world') / 'dpsyn.db'}"
    upgrade(url)
    yield from make_api(url, metrics_token=METRICS_TOKEN)


@pytest.fixture(scope="module")
def world(world_api: Api) -> World:
    api = world_api
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    api.run_job(job["id"])
    rows = [{"text": f"{MARKER} a film {i}", "label": f"{MARKER}-genre"} for i in range(12)]
    x_dataset = api.upload(rows, task="mitg")
    api.budget(x_dataset["id"], 3.0)
    x_job = api.submit(x_dataset["id"]).json()
    api.run_job(x_job["id"], marker="Sentence:")
    done = {j["id"]: j for j in api.client.get("/v1/jobs", headers=auth(api.admin)).json()}
    return World(
        api, dataset, done[job["id"]], done[job["id"]]["prompt_id"],
        x_dataset, done[x_job["id"]]["prompt_id"],
    )  # fmt: skip


def test_a_finished_job_points_to_its_prompt_and_its_charge_is_committed(world: World) -> None:
    job = world.job
    assert job["status"] == "succeeded" and job["prompt_id"] == world.prompt_id
    assert job["progress"]["done"] == job["progress"]["total"] == 8
    assert job["finished_at"] is not None and job["error"] is None
    path = f"/v1/datasets/{world.dataset['id']}/budget"
    budget = world.api.client.get(path, headers=auth(world.api.admin)).json()
    assert [e["kind"] for e in budget["history"]] == ["counts", "reserve", "commit"]
    # the job and the dataset's count release, charged once (the job composes at the budget's
    # delta less the release's: a little above its own epsilon)
    # One job after the count release: the filter's one-batch rule, the job composed at half
    # the budget's delta (docs/privacy.md, "The ledger's rule across jobs").
    assert budget["composed"] == pytest.approx(job["epsilon"] + budget["counts_epsilon"], rel=1e-2)
    assert budget["rule"] == "one_batch" and budget["spent"] > budget["composed"]
    cancel = world.api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(world.api.admin))
    assert cancel.status_code == 409 and error_of(cancel)["code"] == "job_finished"


def test_prompts_are_readable_with_a_read_only_key(world: World) -> None:
    api = world.api
    for key in (api.admin, api.reader):
        response = api.client.get(f"/v1/prompts/{world.prompt_id}", headers=auth(key))
        assert response.status_code == 200, response.text
        prompt = response.json()
        assert prompt["job_id"] == world.job["id"] and prompt["method"] == "tang"
        assert prompt["model"] == "fake" and prompt["task"] == "toy"
        assert prompt["epsilon"] == world.job["epsilon"] and prompt["delta"] == world.job["delta"]
        assert prompt["task_spec"]["labels"] == ["w5", "w7"]
        # both planned demonstrations, unless the noise made one only a label's name (the toy
        # labels are words of the fake model): then it is left out, counted and noted
        echoes = (world.job.get("stats") or {}).get("echo_demonstrations", 0)
        labels = sorted(d["label"] for d in prompt["demonstrations"])
        assert len(labels) == 2 - echoes and set(labels) <= {"w5", "w7"}
        assert prompt["prompt"].startswith(TOY_TASK["icl_instruction"])
        assert bool(prompt["notes"]) == bool(echoes)
        for demo in prompt["demonstrations"]:  # noisy words of the fake model's vocabulary,
            # never marked as cut when T_max ended them before a stop token
            words = demo["text"].split()
            assert all(word.startswith("w") for word in words)
            assert f"Question: {demo['text']}\nType: {demo['label']}\n" in prompt["prompt"]
        listed = api.client.get("/v1/prompts", headers=auth(key)).json()
        assert {p["id"] for p in listed} == {world.prompt_id, world.x_prompt_id}
        assert "prompt" not in listed[0]


def test_complete_classification_scores_all_labels_in_one_call(world: World) -> None:
    api = world.api
    calls = len(api.backend.calls)
    response = api.client.post(
        f"/v1/prompts/{world.prompt_id}/complete",
        json={"query": "is it w5"},  # 3 words, newline, "Type:": the fake predicts w5
        headers=auth(api.reader),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "classification" and body["label"] == "w5"
    assert set(body["scores"]) == {"w5", "w7"} and body["scores"]["w5"] > 0.9
    assert sum(body["scores"].values()) == pytest.approx(1.0)
    assert "value" not in body
    new = api.backend.calls[calls:]
    assert [kind for kind, _ in new] == ["probs"] and len(new[0][1]) == 1
    words = api.backend.words(new[0][1][0])
    assert words[-6:] == ["Question:", "is", "it", "w5", "\n", "Type:"]


def test_complete_holds_no_database_lock_while_the_model_runs(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = world.api
    original = api.backend.next_token_probs
    writable = []

    def probs(prompts, token_sets):
        path = api.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, timeout=0.5, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # fails if the request still holds the write lock
            conn.execute("ROLLBACK")
            writable.append(True)
        finally:
            conn.close()
        return original(prompts, token_sets)

    monkeypatch.setattr(api.backend, "next_token_probs", probs)
    response = api.client.post(
        f"/v1/prompts/{world.prompt_id}/complete", json={"query": "q"}, headers=auth(api.admin)
    )
    assert response.status_code == 200 and writable == [True]


def test_complete_retries_a_transient_backend_failure_but_not_a_final_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, sleeps = world.api, list[float]()
    monkeypatch.setattr(prompts, "COMPLETE_RETRY", RetryPolicy(2, 0.5, sleeps.append))
    original = api.backend.next_token_probs
    failures: list[BackendError] = [
        TransientBackendError("vLLM server x /v1/completions: HTTP 503: busy")
    ]
    asked = []

    def flaky(ids, token_sets):
        asked.append(1)
        if failures:
            raise failures.pop()
        return original(ids, token_sets)

    monkeypatch.setattr(api.backend, "next_token_probs", flaky)
    path = f"/v1/prompts/{world.prompt_id}/complete"
    response = api.client.post(path, json={"query": "is it w5"}, headers=auth(api.reader))
    assert response.status_code == 200 and response.json()["label"] == "w5"
    assert len(asked) == 2 and sleeps == [0.5]
    # A rejected request (HTTP 400) is final: asked once, answered 502 with its own code and
    # the model server's status, no "retry later" (it would be refused again)
    failures.append(BackendError("vLLM server x /v1/completions: HTTP 400: bad", status=400))
    response = api.client.post(path, json={"query": "is it w5"}, headers=auth(api.reader))
    assert response.status_code == 502 and error_of(response)["code"] == "backend_rejected"
    message = error_of(response)["message"]
    assert "HTTP 400" in message and "bad" not in message  # its status, never its text
    assert "retry-after" not in response.headers
    assert len(asked) == 3 and sleeps == [0.5]


def test_complete_calibrated_divides_by_the_prompts_content_free_scores_once(
    world: World,
) -> None:
    """Issue 43: contextual calibration lifted TREC zero-shot from 1% to 47% in the
    evaluations, but /complete never applied it. Asked for, the scores are the raw ones
    divided by the prompt's scores for the content-free inputs, renormalised; the answer
    says which it is; the content-free scores are computed on the first such answer only."""
    api, path = world.api, f"/v1/prompts/{world.prompt_id}/complete"

    def answer(**extra: object) -> dict:
        response = api.client.post(
            path, json={"query": "is it w5", **extra}, headers=auth(api.reader)
        )
        assert response.status_code == 200, response.text
        return response.json()

    raw = answer()
    assert raw["calibration"] == "none"
    calibrated = answer(calibrated=True)
    assert calibrated["calibration"] == "contextual"
    prompt = api.client.get(f"/v1/prompts/{world.prompt_id}", headers=auth(api.admin)).json()
    task = TaskSpec.model_validate(prompt["task_spec"])
    free = label_probabilities(api.backend, task, prompt["prompt"], list(CONTENT_FREE))
    row = np.array([[raw["scores"][label] for label in task.labels]])
    expected = contextual_calibration(row, free)[0]
    assert [calibrated["scores"][label] for label in task.labels] == pytest.approx(expected)
    assert calibrated["label"] == task.labels[int(np.argmax(expected))]
    calls = len(api.backend.calls)
    answer(calibrated=True)
    new = api.backend.calls[calls:]
    assert [kind for kind, _ in new] == ["probs"] and len(new[0][1]) == 1  # the query only
    extraction = api.client.post(
        f"/v1/prompts/{world.x_prompt_id}/complete",
        json={"query": "a funny film", "calibrated": True},
        headers=auth(api.admin),
    )
    assert extraction.status_code == 422
    assert "calibration applies to classification" in error_of(extraction)["message"]


def test_complete_extraction_generates_to_the_end_of_the_line(world: World) -> None:
    api = world.api
    response = api.client.post(
        f"/v1/prompts/{world.x_prompt_id}/complete",
        json={"query": "a funny film"},
        headers=auth(api.admin),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "extraction" and body["value"] == " ".join(["w0"] * 12)
    assert "label" not in body and "scores" not in body


def test_complete_validation_names_the_field(world: World) -> None:
    api = world.api
    path = f"/v1/prompts/{world.prompt_id}/complete"
    for body in ({}, {"query": ""}, {"query": "x", "other": 1}):
        response = api.client.post(path, json=body, headers=auth(api.admin))
        assert response.status_code == 422
        error = error_of(response)
        assert error["fields"][0]["field"] in ("query", "other"), error


def _eval_and_complete(world: World, prompt_id: str, test: list[Record]) -> tuple[Score, list]:
    """``dpsyn eval``'s score of a stored prompt, and ``/complete``'s answers, same queries."""
    api = world.api
    stored = api.client.get(f"/v1/prompts/{prompt_id}", headers=auth(api.reader)).json()
    task = TaskSpec.model_validate(stored["task_spec"])
    score = evaluate(api.backend, task, stored["prompt"], test, calibrated=False)
    answers = []
    path = f"/v1/prompts/{prompt_id}/complete"
    for record in test:
        response = api.client.post(path, json={"query": record.text}, headers=auth(api.reader))
        assert response.status_code == 200, response.text
        answers.append(response.json())
    return score, answers


def test_eval_accuracy_is_the_accuracy_of_the_answers_complete_gives(world: World) -> None:
    # Classification: the fake wants w{n} n tokens after "Question:", so a 3-word query
    # (then "\n", "Type:") is answered w5, a 5-word one w7, other lengths a tie (w5, first).
    test = [
        Record("is it w5", "w5"),
        Record("one two three four five", "w7"),
        Record("one two three four five", "w5"),  # wrong on purpose
        Record("four words in here", "w7"),  # a tie: answered w5, wrong
        Record("x", "w5"),  # a tie: answered w5, right
    ]
    score, answers = _eval_and_complete(world, world.prompt_id, test)
    labels = [a["label"] for a in answers]
    assert labels == ["w5", "w7", "w7", "w5", "w5"]
    agree = sum(label == r.label for label, r in zip(labels, test, strict=True)) / len(test)
    assert score.accuracy == agree == 3 / 5
    # Extraction: the fake's greedy continuation never ends a line, so /complete answers its
    # full 12 tokens; eval must score that same value (it used to stop at 8 tokens).
    served = " ".join(["w0"] * 12)
    x_test = [Record("a funny film", served), Record("a sad film", "w0"), Record("x", served)]
    x_score, x_answers = _eval_and_complete(world, world.x_prompt_id, x_test)
    assert [a["value"] for a in x_answers] == [served] * 3
    assert x_score.accuracy == pytest.approx(2 / 3)


def test_a_read_only_key_gets_403_outside_prompts(world: World) -> None:
    api, reader = world.api, auth(world.api.reader)
    dataset, job = world.dataset["id"], world.job["id"]
    requests = [
        ("GET", "/v1/datasets", None),
        ("POST", "/v1/datasets", {"task": "sst2", "records": [{"text": "a", "label": "0"}]}),
        ("GET", f"/v1/datasets/{dataset}", None),
        ("DELETE", f"/v1/datasets/{dataset}", None),
        ("GET", f"/v1/datasets/{dataset}/budget", None),
        ("PUT", f"/v1/datasets/{dataset}/budget", {"epsilon": 9}),
        ("GET", "/v1/jobs", None),
        ("POST", "/v1/jobs", {"dataset_id": dataset, "epsilon": 1}),
        ("GET", f"/v1/jobs/{job}", None),
        ("POST", f"/v1/jobs/{job}/cancel", None),
        ("GET", "/v1/keys", None),
        ("POST", "/v1/keys", {"scope": "admin"}),
    ]
    for method, path, body in requests:
        response = api.client.request(method, path, json=body, headers=reader)
        assert response.status_code == 403, (method, path, response.text)
        assert error_of(response)["code"] == "insufficient_scope"


def test_other_tenants_cannot_see_or_use_prompts(world: World) -> None:
    api, other = world.api, auth(world.api.other)
    assert api.client.get("/v1/prompts", headers=other).json() == []
    for response in (
        api.client.get(f"/v1/prompts/{world.prompt_id}", headers=other),
        api.client.post(
            f"/v1/prompts/{world.prompt_id}/complete", json={"query": "q"}, headers=other
        ),
        api.client.get(f"/v1/jobs/{world.job['id']}", headers=other),
        api.client.get(f"/v1/datasets/{world.dataset['id']}/budget", headers=other),
    ):
        assert response.status_code == 404, response.text
    assert api.client.get("/v1/jobs", headers=other).json() == []


def test_keys_are_shown_once_scoped_and_revocable(world: World) -> None:
    api = world.api
    created = api.client.post("/v1/keys", json={"scope": "prompts:read"}, headers=auth(api.admin))
    assert created.status_code == 201
    key = created.json()
    assert key["scope"] == "prompts:read" and key["key"].startswith("dpsyn_")
    assert api.client.get("/v1/prompts", headers=auth(key["key"])).status_code == 200
    assert api.client.get("/v1/datasets", headers=auth(key["key"])).status_code == 403
    listed = api.client.get("/v1/keys", headers=auth(api.admin)).json()
    assert key["id"] in {k["id"] for k in listed} and all("key" not in k for k in listed)
    assert api.client.delete(f"/v1/keys/{key['id']}", headers=auth(api.other)).status_code == 404
    revoked = api.client.delete(f"/v1/keys/{key['id']}", headers=auth(api.admin))
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    gone = api.client.get("/v1/prompts", headers=auth(key["key"]))
    assert gone.status_code == 401 and error_of(gone)["code"] == "unauthorized"
    bad = api.client.post("/v1/keys", json={"scope": "root"}, headers=auth(api.admin))
    assert bad.status_code == 422 and "scope" in error_of(bad)["message"]


def test_authentication(world: World) -> None:
    client = world.api.client
    missing = client.get("/v1/prompts")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in error_of(missing)["message"]
    assert client.get("/v1/prompts", headers=auth("dpsyn_nope")).status_code == 401
    basic = client.get("/v1/prompts", headers={"Authorization": "Basic YTpi"})
    assert basic.status_code == 401
    # The bootstrap key is an admin key of the tenant "default", which sees nothing else.
    assert client.get("/v1/datasets", headers=auth(BOOTSTRAP_KEY)).json() == []


def test_health_metrics_and_docs(world: World) -> None:
    client = world.api.client
    assert client.get("/healthz").json() == {"status": "ok", "database": "reachable"}
    response = client.get("/metrics", headers=auth(METRICS_TOKEN))  # per-dataset series
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    jobs = {s.labels["status"]: s.value for s in families["dpsyn_jobs"].samples}
    assert jobs["succeeded"] >= 2 and jobs["queued"] == 0
    [tokens] = [s for s in families["dpsyn_tokens_generated"].samples if s.name.endswith("total")]
    assert tokens.value == 16
    spent = {
        s.labels["dataset_id"]: s.value for s in families["dpsyn_ledger_epsilon_spent"].samples
    }
    budget = client.get(
        f"/v1/datasets/{world.dataset['id']}/budget", headers=auth(world.api.admin)
    ).json()
    assert spent[world.dataset["id"]] == pytest.approx(budget["spent"], rel=1e-12)
    assert budget["spent"] > world.job["epsilon"] + budget["counts_epsilon"] > world.job["epsilon"]
    again = client.get("/metrics", headers=auth(METRICS_TOKEN))
    assert again.text == response.text  # cached spend, same answer
    assert "/v1/datasets" in client.get("/openapi.json").json()["paths"]
    assert client.get("/docs").status_code == 200


def test_no_response_contained_record_text(world: World) -> None:
    world.api.client.assert_no_private_text()
    assert len(world.api.client.bodies) > 20


def test_a_query_may_hold_nul_but_not_a_lone_surrogate(world: World) -> None:
    """A query is never stored: NUL is just a character; an unpaired surrogate cannot be
    encoded for the model, so it is a 422 rather than a failure inside the backend."""
    client, path = world.api.client, f"/v1/prompts/{world.prompt_id}/complete"
    answered = client.post(path, json={"query": "what\x00 is it"}, headers=auth(world.api.reader))
    assert answered.status_code == 200, answered.text
    refused = client.post(
        path,
        content=b'{"query": "what \\ud800 is it"}',
        headers={**auth(world.api.reader), "Content-Type": "application/json"},
    )
    assert refused.status_code == 422 and "query" in error_of(refused)["message"]
