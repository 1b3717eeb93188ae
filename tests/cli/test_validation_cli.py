"""``dpsyn`` and a job's validation set (issue 24): ``datasets upload --public --labelled``,
``jobs submit --validation-dataset``, the score in ``prompts get`` and the submitting key in
``jobs show``, against a live server with the in-process worker and the fake backend."""

from __future__ import annotations

import os
import time

import httpx

from app.synthesis.tasks import BUILTIN_TASKS
from tests.cli.live_server import CODES, FAST, KEY, SECRET, upload

VALID = "VALIDWORD"


def _validation_file(tmp_path):
    path = tmp_path / "valid.txt"
    lines = [f"{code}:x {VALID}{code}{i} where is it ?" for code in sorted(CODES) for i in range(3)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _prompt_when_scored(dpsyn, prompt_id: str) -> str:
    """``prompts get`` once the worker has scored the prompt (it does so after storing it)."""
    deadline = time.monotonic() + 30
    while "validation: pending" in (shown := dpsyn("prompts", "get", prompt_id)).output:
        assert time.monotonic() < deadline, shown.output
        time.sleep(0.1)
    assert shown.exit_code == 0, shown.output
    return shown.output


def test_a_job_scored_on_a_labelled_public_dataset(dpsyn, trec_file, tmp_path):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    uploaded = dpsyn(
        "datasets", "upload", str(_validation_file(tmp_path)), "--public", "--labelled",
        "--task", "trec", "--json",
    )  # fmt: skip
    assert uploaded.exit_code == 0, uploaded.output
    validation = httpx.Response(200, content=uploaded.output).json()["id"]
    described = dpsyn("datasets", "show", validation).output
    assert "(public, labelled: a validation set, never charged): 18 records" in described

    submitted = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--epsilon", "8", *FAST,
        "--validation-dataset", validation, "--wait", "--poll", "0.1",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    prompt_id = submitted.output.strip().splitlines()[-1].rsplit(None, 1)[-1]

    shown = _prompt_when_scored(dpsyn, prompt_id)
    prompt = _get(f"/v1/prompts/{prompt_id}")
    scored = prompt["validation"]
    assert scored["status"] == "scored" and scored["n"] == 18
    expected = f"validation: accuracy {scored['accuracy']:.3f} on 18 records of public dataset"
    assert f"{expected} {validation}" in shown
    # beside what it must beat (issue 33): zero-shot and the majority label, and a verdict
    base = scored["baselines"]
    assert 0 <= base["zero_shot"] <= 1 and base["majority_label"] in BUILTIN_TASKS["trec"].labels
    assert f"baselines: zero-shot {base['zero_shot']:.3f}, majority label" in shown
    assert f"this prompt {scored['verdict']}" in shown and scored["verdict"]
    listed = dpsyn("prompts", "list", "--sort", "validation").output
    assert f"{scored['accuracy']:.3f}" in listed
    # --wait waited for the score and printed it under the job's line, not "pending"
    assert f"{expected} {validation}" in submitted.output
    job = _get(f"/v1/jobs/{prompt['job_id']}")
    assert job["validation_dataset_id"] == validation and job["submitted_by"]

    job_shown = dpsyn("jobs", "show", job["id"])
    assert f"validation set {validation}" in job_shown.output
    assert f"submitted by key {job['submitted_by']}" in job_shown.output
    assert job["submitted_by"]
    for result in (uploaded, submitted, job_shown):
        assert SECRET not in result.output and VALID not in result.output
    assert SECRET not in shown and VALID not in shown


def _get(path: str) -> dict:
    """The server's JSON for ``path``, with the admin key."""
    headers = {"Authorization": f"Bearer {KEY}"}
    response = httpx.get(f"{os.environ['DPSYN_URL']}{path}", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_labelled_needs_public_and_a_task(dpsyn, tmp_path):
    path = _validation_file(tmp_path)
    private = dpsyn("datasets", "upload", str(path), "--task", "trec", "--labelled")
    assert private.exit_code == 2 and "--labelled: only with --public" in private.output
    no_task = dpsyn("datasets", "upload", str(path), "--public", "--labelled")
    assert no_task.exit_code == 2, no_task.output
    assert "--task is required for a labelled public dataset" in no_task.output
    assert "--labels a,b,..." in no_task.output  # or a custom task, as a private upload


def test_a_private_validation_set_is_refused_naming_the_option(dpsyn, trec_file):
    dataset = upload(dpsyn, trec_file)
    dpsyn("budget", "set", dataset, "--epsilon", "10")
    refused = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--epsilon", "8", *FAST,
        "--validation-dataset", dataset,
    )  # fmt: skip
    assert refused.exit_code != 0
    assert "is private" in refused.output


class _PendingApi:
    """A server whose prompt stays pending (the worker has not scored it yet)."""

    def __init__(self) -> None:
        self.reads = 0

    def call(self, method: str, path: str, **_: object) -> dict:
        assert (method, path) == ("GET", "/v1/prompts/p1")
        self.reads += 1
        return {"validation": {"status": "pending", "dataset_id": "v1"}}


def test_wait_gives_up_on_the_score_at_the_deadline_without_failing():
    """Past ``--timeout`` the score is left pending (the job succeeded; its prompt is stored)."""
    from app.cli.client.jobs import _wait

    api = _PendingApi()
    job = {"id": "j1", "status": "succeeded", "progress": {"done": 1, "total": 1},
           "validation_dataset_id": "v1", "prompt_id": "p1"}  # fmt: skip
    done, validation = _wait(api, job, interval=0.01, timeout=0.05)  # type: ignore[arg-type]
    assert done == job and validation == {"status": "pending", "dataset_id": "v1"}
    assert api.reads >= 2  # it did wait, then gave up


def test_wait_skips_the_score_of_a_job_without_a_validation_set():
    from app.cli.client.jobs import _wait

    api = _PendingApi()
    job = {"id": "j1", "status": "succeeded", "progress": {"done": 1, "total": 1},
           "validation_dataset_id": None, "prompt_id": "p1"}  # fmt: skip
    assert _wait(api, job, interval=0.01, timeout=1.0) == (job, None)  # type: ignore[arg-type]
    assert api.reads == 0
