"""A quality signal without privacy cost (issue 24): a job's prompt scored on a public labelled
validation set after it is stored, and the key that submitted a job.

Each test fails if its part breaks: the stored accuracy must equal the one scorer's on the
same records, each refusal names its problem, a pending score must not stick in the prompt
cache, a scoring failure must leave the job succeeded with its prompt, the scorer must never
see a private record, and the job must name the key that submitted it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

from app.api.routes.prompts import prompt_cache
from app.api.schemas import (
    ValidationBaselines,
    ValidationPublic,
    validation_outcome,
    validation_verdict,
)
from app.db.models import Job, PromptSet
from app.db.session import session_scope
from app.eval.icl import evaluate
from app.eval.verdict import Outcome
from app.llm.provider import StaticProvider
from app.llm.retry import RetryPolicy
from app.services import prompts as prompt_service
from app.services.prompts import VALIDATION_MAX_RECORDS, validation_sample
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import TaskSpec
from tests.api.conftest import TOY_TASK, Api, auth, error_of, make_api, toy_rows
from tests.synthesis.fake_backend import FakeBackend
from tests.ui.test_pages import key_id_of
from workers import runner

SECRET = "SECRETWORDXYZ"  # in every private record of the leak test
VALID = "VALIDWORD"  # in every validation record


def validation_rows() -> list[dict[str, str]]:
    """Four public labelled records the fake backend answers 3 of 4 right: it predicts w5
    for a three-word question and w7 for a five-word one (tests/api/conftest.py)."""
    return [
        {"text": f"{VALID} two three", "label": "w5"},
        {"text": f"{VALID} two three four five", "label": "w7"},
        {"text": f"{VALID} two three", "label": "w7"},  # answered w5: wrong
        {"text": f"{VALID} b c", "label": "w5"},
    ]


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def upload_validation(api: Api, rows: list[dict] | None = None, **kw: Any) -> dict:
    body = {
        "public": True,
        "labelled": True,
        "task": TOY_TASK,
        "records": rows or validation_rows(),
        **kw,
    }
    response = api.client.post("/v1/datasets", json=body, headers=auth(api.admin))
    assert response.status_code == 201, response.text
    return response.json()


def _funded(api: Api, rows: list[dict] | None = None) -> str:
    dataset = api.upload(rows)
    assert api.budget(dataset["id"], 5.0).status_code == 200
    return dataset["id"]


def _job(api: Api, validation_id: str, rows: list[dict] | None = None) -> dict:
    response = api.submit(_funded(api, rows), validation_dataset_id=validation_id)
    assert response.status_code == 201, response.text
    return response.json()


def _prompt_of(api: Api, job_id: str) -> dict:
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    assert job["status"] == "succeeded", job
    response = api.client.get(f"/v1/prompts/{job['prompt_id']}", headers=auth(api.reader))
    assert response.status_code == 200
    return response.json()


def test_a_labelled_public_upload_keeps_its_labels_and_takes_no_budget(api: Api) -> None:
    dataset = upload_validation(api)
    assert dataset["kind"] == "public" and dataset["labelled"] is True
    assert dataset["label_counts"] == {"w5": 2, "w7": 2}
    assert api.upload_public()["labelled"] is False
    assert api.budget(dataset["id"]).status_code == 409  # public: never charged, no budget


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"labelled": True, "task": TOY_TASK}, "labelled"),  # labelled, not public
        ({"public": True, "labelled": True}, "task"),  # no task to check its labels
    ],
)
def test_a_labelled_upload_is_refused_naming_the_problem(api: Api, body: dict, field: str) -> None:
    response = api.client.post(
        "/v1/datasets", json={**body, "records": validation_rows()}, headers=auth(api.admin)
    )
    assert response.status_code == 422
    assert error_of(response)["message"].startswith(f"{field}:")


def test_a_label_outside_the_task_is_refused(api: Api) -> None:
    rows = [*validation_rows(), {"text": f"{VALID} x y", "label": "w9"}]
    body = {"public": True, "labelled": True, "task": TOY_TASK, "records": rows}
    response = api.client.post("/v1/datasets", json=body, headers=auth(api.admin))
    assert response.status_code == 422
    assert "not labels of task 'toy'" in error_of(response)["message"]


def test_the_stored_accuracy_is_the_scorers_on_the_same_records(api: Api) -> None:
    validation = upload_validation(api)
    job = _job(api, validation["id"])
    assert job["validation_dataset_id"] == validation["id"]
    api.run_worker(job["id"])
    prompt = _prompt_of(api, job["id"])
    task = TaskSpec.model_validate(prompt["task_spec"])
    records = [Record(r["text"], r["label"]) for r in validation_rows()]
    direct = evaluate(FakeBackend(stop_after=None), task, prompt["prompt"], records)
    assert direct.accuracy == 0.75  # the fixture's design: the check below is not 1 == 1
    zero = evaluate(FakeBackend(stop_after=None), task, demonstration_prompt(task, []), records)
    assert prompt["validation"] == {
        "dataset_id": validation["id"],
        "status": "scored",
        "n": 4,
        "accuracy": direct.accuracy,
        # and calibrated, as /complete answers with calibrated=true (issue 43)
        "calibrated_accuracy": direct.calibrated_accuracy,
        "reason": None,
        # The baselines on the same records (issue 33): the fake model answers by length,
        # demonstrations or not, so zero-shot scores the same; the labels tie 2-2.
        "baselines": {
            "zero_shot": zero.accuracy,
            "majority": 0.5,
            "majority_label": "w7",
            "zero_shot_calibrated": zero.calibrated_accuracy,
        },
        # a tie on 4 records: no verdict either way (issue 55, item 1)
        "verdict": "cannot tell on 4 records: level with zero-shot, within the ±0.500 that 4 "
        "records allow",
        "outcome": "cannot_tell",
        "calibrated_verdict": prompt["validation"]["calibrated_verdict"],
        "calibrated_outcome": prompt["validation"]["calibrated_outcome"],
    }
    assert direct.calibrated_accuracy is not None and zero.calibrated_accuracy is not None
    listed = api.client.get("/v1/prompts", headers=auth(api.reader)).json()
    (row,) = [p for p in listed if p["id"] == prompt["id"]]
    assert (row["validation_accuracy"], row["beats_zero_shot"]) == (0.75, False)
    assert row["validation_outcome"] == "cannot_tell"


@pytest.mark.parametrize(
    ("accuracy", "zero", "majority", "verdict"),
    [
        (0.8, 0.6, 0.5, "beats zero-shot and the majority label (by +0.200 over zero-shot, "
         "beyond the ±0.025 that 1000 records allow)"),
        (0.7, 0.6, 0.65, "beats zero-shot and the majority label (by +0.050 over the "
         "majority label, beyond the ±0.029 that 1000 records allow)"),
        (0.485, 0.547, 0.5, "is behind zero-shot (0.485 against 0.547, beyond the ±0.032 that "
         "1000 records allow): the instruction alone answers these records better than this "
         "prompt"),
        (0.55, 0.5, 0.6, "is behind the majority label (0.550 against 0.600, beyond the ±0.031 "
         "that 1000 records allow)"),
    ],
)  # fmt: skip
def test_the_verdict_says_what_the_prompt_beats(accuracy, zero, majority, verdict) -> None:
    baselines = ValidationBaselines(zero_shot=zero, majority=majority, majority_label="a")
    assert validation_verdict(accuracy, baselines, n=1000) == verdict


def test_a_lead_the_records_cannot_carry_is_no_verdict() -> None:
    """Issue 43: "beats zero-shot and the majority label (+0.021)" on 48 records, one record."""
    baselines = ValidationBaselines(zero_shot=0.396, majority=0.417, majority_label="billing")
    verdict = validation_verdict(0.438, baselines, n=48)
    assert verdict.startswith("cannot tell on 48 records: ahead of the majority label by +0.021")
    needed = int(verdict.rsplit("about ", 1)[1].split()[0])
    assert needed > 1000  # a 2-point lead needs thousands of records
    # a lead well outside the records' noise is still a verdict
    assert validation_verdict(0.9, baselines, n=48).startswith("beats zero-shot and the")


def test_a_deficit_the_records_cannot_carry_is_no_verdict_either() -> None:
    """Issue 55: "does not beat zero-shot (0.396 against 0.458)" was said of 3 records in 48,
    inside the same margin that made a lead "cannot tell"."""
    baselines = ValidationBaselines(zero_shot=0.458, majority=0.25, majority_label="billing")
    verdict = validation_verdict(0.396, baselines, n=48)
    assert verdict.startswith("cannot tell on 48 records: behind zero-shot by -0.062, within")
    assert verdict.endswith("records would tell a deficit of this size")
    assert validation_outcome(0.396, baselines, 48) is Outcome.CANNOT_TELL
    # the calibrated line is judged by the same rule, against calibrated zero-shot
    scored = ValidationPublic(
        dataset_id="d", status="scored", n=48, accuracy=0.6, calibrated_accuracy=0.396,
        baselines={**baselines.model_dump(), "zero_shot": 0.2, "zero_shot_calibrated": 0.458},
    )  # fmt: skip
    assert scored.outcome == "ahead" and scored.calibrated_outcome == "cannot_tell"
    assert scored.calibrated_verdict == verdict
    # a deficit beyond the margin is one: 0.292 on 48 is 8 records behind
    behind = validation_verdict(0.292, baselines, n=48)
    assert behind.startswith("is behind zero-shot (0.292 against 0.458, beyond the ±0.131")
    assert validation_outcome(0.292, baselines, 48) is Outcome.BEHIND


def _stored(api: Api, accuracy: float, zero: float, n: int) -> dict:
    """A scored prompt whose stored validation has these numbers (as the worker writes them),
    read back through the API: (its listed row, its prompt)."""
    job = _job(api, upload_validation(api)["id"])
    with mock.patch.object(runner, "_validate"):
        api.run_worker(job["id"])
    prompt_id = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]
    with session_scope(api.url) as session:
        row = session.get(PromptSet, prompt_id)
        assert row is not None
        baselines = {"zero_shot": zero, "majority": 0.25, "majority_label": "w5"}
        row.validation = {**(row.validation or {}), "status": "scored", "n": n,
                          "accuracy": accuracy, "baselines": baselines}  # fmt: skip
    listed = api.client.get("/v1/prompts", headers=auth(api.reader)).json()
    (summary,) = [p for p in listed if p["id"] == prompt_id]
    return {"summary": summary, "prompt": _prompt_of(api, job["id"])}


@pytest.mark.parametrize(
    ("accuracy", "zero", "n", "outcome", "words"),
    [
        (0.5, 0.458, 48, "cannot_tell", "cannot tell on 48 records: ahead of zero-shot"),
        (0.396, 0.458, 48, "cannot_tell", "cannot tell on 48 records: behind zero-shot"),
        (0.292, 0.458, 48, "behind", "is behind zero-shot"),
        (0.9, 0.458, 48, "ahead", "beats zero-shot and the majority label"),
    ],
)  # fmt: skip
def test_the_boolean_the_outcome_and_the_verdict_agree(
    api: Api, accuracy: float, zero: float, n: int, outcome: str, words: str
) -> None:
    """Issue 55: ``"beats_zero_shot": true`` stood beside "cannot tell on 48 records"; an app
    filtering on the boolean shipped a prompt whose lead was within the noise."""
    read = _stored(api, accuracy, zero, n)
    summary, validation = read["summary"], read["prompt"]["validation"]
    assert validation["verdict"].startswith(words)
    assert validation["outcome"] == summary["validation_outcome"] == outcome
    assert read["prompt"]["validation_outcome"] == outcome
    assert summary["beats_zero_shot"] is read["prompt"]["beats_zero_shot"] is (outcome == "ahead")


def test_the_sample_is_capped_evenly_spaced_and_deterministic() -> None:
    records = [Record(str(i), "w5") for i in range(1000)]
    sample = validation_sample(records)
    assert len(sample) == VALIDATION_MAX_RECORDS
    assert sample[0].text == "0" and sample[1].text == "5" and sample[-1].text == "995"
    assert validation_sample(records) == sample
    assert validation_sample(records[:7]) == records[:7]


def _refusal(api: Api, validation_id: str) -> Any:
    return api.submit(_funded(api), validation_dataset_id=validation_id)


def test_a_validation_set_is_refused_naming_the_problem(api: Api) -> None:
    unknown = _refusal(api, "0" * 32)
    assert unknown.status_code == 404 and "validation_dataset_id" in error_of(unknown)["message"]
    private = _refusal(api, api.upload()["id"])
    assert private.status_code == 422 and error_of(private)["code"] == "not_public"
    unlabelled = _refusal(api, api.upload_public()["id"])
    assert unlabelled.status_code == 422 and error_of(unlabelled)["code"] == "not_labelled"
    other_task = {**TOY_TASK, "name": "other", "labels": ["w5", "w6"]}
    rows = [{"text": f"{VALID} a b", "label": "w6"}]
    mismatched = _refusal(api, upload_validation(api, rows, task=other_task)["id"])
    assert mismatched.status_code == 422
    error = error_of(mismatched)
    assert error["code"] == "validation_labels" and "w6" in error["message"]
    deleted = upload_validation(api)
    api.client.delete(f"/v1/datasets/{deleted['id']}", headers=auth(api.admin))
    gone = _refusal(api, deleted["id"])
    assert gone.status_code == 409 and error_of(gone)["code"] == "dataset_deleted"
    with session_scope(api.url) as session:  # a refused submission stores no job
        assert session.query(Job).count() == 0


def test_a_pending_score_is_not_cached_and_the_score_changes_the_etag(api: Api) -> None:
    validation = upload_validation(api)
    job = _job(api, validation["id"])
    with mock.patch.object(runner, "_validate"):  # the worker stops before step 6
        api.run_worker(job["id"])
    prompt = _prompt_of(api, job["id"])
    assert prompt["validation"]["status"] == "pending"
    path = f"/v1/prompts/{prompt['id']}"
    first = api.client.get(path, headers=auth(api.reader))
    assert len(prompt_cache(api.client.app)) == 0  # a pending body is never kept
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        session.expunge(row)
    runner._validate(
        row, api.url, StaticProvider(FakeBackend(stop_after=None)), RetryPolicy(retries=0)
    )
    etag = first.headers["etag"]
    after = api.client.get(path, headers={**auth(api.reader), "If-None-Match": etag})
    assert after.status_code == 200 and after.headers["etag"] != etag
    assert after.json()["validation"]["status"] == "scored"
    assert len(prompt_cache(api.client.app)) == 1  # final now: cached
    again = api.client.get(
        path, headers={**auth(api.reader), "If-None-Match": after.headers["etag"]}
    )
    assert again.status_code == 304


def test_a_scoring_failure_keeps_the_job_and_its_prompt(api: Api) -> None:
    validation = upload_validation(api)
    job = _job(api, validation["id"])
    boom = RuntimeError(f"{VALID} quoted by a failing model")
    with mock.patch.object(runner, "score_prompt", side_effect=boom):
        api.run_worker(job["id"])
    prompt = _prompt_of(api, job["id"])
    assert prompt["prompt"]  # stored
    reason = prompt["validation"]["reason"]
    assert prompt["validation"]["status"] == "not_scored"
    assert "RuntimeError" in reason and VALID not in reason  # its type, never its message


def test_a_validation_set_deleted_before_the_run_is_not_scored(api: Api) -> None:
    validation = upload_validation(api)
    job = _job(api, validation["id"])
    deleted = api.client.delete(f"/v1/datasets/{validation['id']}", headers=auth(api.admin))
    assert deleted.status_code == 200
    api.run_worker(job["id"])  # not cancelled: scoring is optional post-processing
    validation_view = _prompt_of(api, job["id"])["validation"]
    assert validation_view["status"] == "not_scored"
    assert validation_view["reason"] == "the validation dataset was deleted"


class _Watched(FakeBackend):
    """The fake backend, noting which words it saw in each phase of the job."""

    def __init__(self) -> None:
        super().__init__(stop_after=None)
        self.phase = "synthesis"
        self.seen: dict[str, set[str]] = {"synthesis": set(), "validation": set()}

    def next_token_probs(self, prompts: Any, token_sets: Any) -> Any:
        for prompt in prompts:
            self.seen[self.phase].update(self.words(prompt))
        return super().next_token_probs(prompts, token_sets)

    def top_k(self, prompts: Any, k: int) -> Any:
        for prompt in prompts:
            self.seen[self.phase].update(self.words(prompt))
        return super().top_k(prompts, k)


def _run_watched(api: Api, job_id: str) -> _Watched:
    backend = _Watched()
    real = runner._validate

    def validate(*args: Any) -> None:
        backend.phase = "validation"
        real(*args)

    with mock.patch.object(runner, "_validate", validate):
        api.run_worker(job_id, backend)
    return backend


def test_the_scorer_never_receives_a_private_record(api: Api) -> None:
    rows = [{**row, "text": f"{SECRET} {row['text']}"} for row in toy_rows()]
    job = _job(api, upload_validation(api)["id"], rows)
    backend = _run_watched(api, job["id"])
    assert SECRET in backend.seen["synthesis"]  # the run did read the private records
    assert VALID in backend.seen["validation"]  # and validation did score something
    assert SECRET not in backend.seen["validation"]
    assert _prompt_of(api, job["id"])["validation"]["status"] == "scored"


def test_a_job_row_edited_to_a_private_validation_set_scores_nothing(api: Api) -> None:
    rows = [{**row, "text": f"{SECRET} {row['text']}"} for row in toy_rows()]
    job = _job(api, upload_validation(api)["id"], rows)
    with session_scope(api.url) as session:  # as if the row were tampered with
        row = session.get(Job, job["id"])
        assert row is not None
        row.validation_dataset_id = row.dataset_id
    backend = _run_watched(api, job["id"])
    assert not backend.seen["validation"]  # the backend was not even called
    validation_view = _prompt_of(api, job["id"])["validation"]
    assert validation_view["status"] == "not_scored"
    assert "not a public labelled dataset" in validation_view["reason"]


def test_a_job_records_the_key_that_submitted_it(api: Api) -> None:
    job = api.submit(_funded(api)).json()
    assert job["submitted_by"] == key_id_of(api, api.admin)
    assert job["validation_dataset_id"] is None
    listed = api.client.get("/v1/jobs", headers=auth(api.admin)).json()
    assert listed[0]["submitted_by"] == job["submitted_by"]


def test_a_score_is_written_once(api: Api) -> None:
    validation = upload_validation(api)
    job = _job(api, validation["id"])
    api.run_worker(job["id"])
    prompt_id = _prompt_of(api, job["id"])["id"]
    with session_scope(api.url) as session:
        assert not prompt_service.record_validation(session, prompt_id, {"reason": "late"})
        row = session.get(PromptSet, prompt_id)
        assert row is not None and row.validation is not None
        assert row.validation["status"] == "scored"


def test_the_score_is_stored_and_served_on_postgresql(postgres_url: str) -> None:
    """The same path on PostgreSQL (the row lock of record_validation, the JSON column)."""
    for api in make_api(postgres_url):
        validation = upload_validation(api)
        job = _job(api, validation["id"])
        assert job["submitted_by"] == key_id_of(api, api.admin)
        api.run_worker(job["id"])
        scored = _prompt_of(api, job["id"])["validation"]
        assert scored["status"] == "scored" and (scored["n"], scored["accuracy"]) == (4, 0.75)


def test_a_redelivered_task_scores_a_prompt_left_pending(api: Api) -> None:
    validation = upload_validation(api)
    job = _job(api, validation["id"])
    with mock.patch.object(runner, "_validate"):  # the worker dies after storing the prompt
        api.run_worker(job["id"])
    assert _prompt_of(api, job["id"])["validation"]["status"] == "pending"
    backend = FakeBackend(stop_after=None)
    api.run_worker(job["id"], backend)  # the task again: the job is final, step 6 only
    assert all(kind == "probs" for kind, _ in backend.calls)  # scoring, no generation
    scored = _prompt_of(api, job["id"])["validation"]
    assert (scored["status"], scored["n"], scored["accuracy"]) == ("scored", 4, 0.75)
    again = FakeBackend(stop_after=None)
    api.run_worker(job["id"], again)  # once scored, a delivery does nothing at all
    assert again.calls == []
