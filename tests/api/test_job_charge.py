"""What a job costs, as its API response says: ``charge``, ``charged_epsilon``,
``charge_note`` and ``read_private_data`` in each way a job can end (issue 24, item 1), read
from the ledger; and the parameters it ran with. The jobs run through the real worker on the
fake backend; the API fixture fails a test if any response shows record text."""

from __future__ import annotations

import html
from typing import Any

import pytest

from app.api.schemas import JobPublic
from app.cli.client.jobs import _describe_job
from app.db.models import Job
from app.db.session import session_scope
from app.llm.base import BackendError
from app.llm.fake import FakeBackend
from app.methods.registry import get_method
from tests.api.conftest import FAST_PARAMS, PATE_PARAMS, Api, auth, public_rows
from tests.ui.test_pages import sign_in


def _job(api: Api, job_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin))
    assert response.status_code == 200, response.text
    return response.json()


def _history(api: Api, dataset_id: str) -> list[dict[str, Any]]:
    budget = api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
    return budget.json()["history"]


def _funded(api: Api, epsilon: float = 3.0) -> str:
    dataset = api.upload()
    assert api.budget(dataset["id"], epsilon).status_code == 200
    return dataset["id"]


class CancelOnFirstCall(FakeBackend):
    """Cancels the job through the API on its first model call: after the worker's read
    mark, before anything is stored (the next progress report sees it)."""

    def __init__(self, api: Api, job_id: str) -> None:
        super().__init__(stop_after=None)
        self.api, self.job_id, self.cancelled = api, job_id, False

    def next_token_probs(self, prompts: Any, token_sets: Any) -> Any:
        if not self.cancelled:
            self.cancelled = True
            response = self.api.client.post(
                f"/v1/jobs/{self.job_id}/cancel", headers=auth(self.api.admin)
            )
            assert response.status_code == 200, response.text
            running = response.json()
            assert running["status"] == "running" and running["charge"] == "reserved"
            assert running["read_private_data"] is True
            assert "stays charged however it ends" in running["charge_note"]
        return super().next_token_probs(prompts, token_sets)


class FailingBackend(FakeBackend):
    """A final backend error on the first model call, after the read mark."""

    def next_token_probs(self, prompts: Any, token_sets: Any) -> Any:
        raise BackendError("refused", status=400)


def test_a_queued_job_cancelled_is_released_and_says_why(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    assert job["charge"] == "reserved" and job["charged_epsilon"] == job["epsilon"]
    assert job["read_private_data"] is False and "released if the job ends" in job["charge_note"]
    cancelled = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin)).json()
    assert cancelled["status"] == "cancelled" and cancelled["charge"] == "released"
    assert cancelled["charged_epsilon"] == 0.0 and cancelled["read_private_data"] is False
    assert "before it read any private record" in cancelled["charge_note"]
    # the dataset's count release, drawn for the job's plan, stays charged: it is the
    # dataset's, not the job's
    counts, reserve, release = _history(api, dataset_id)
    assert counts["kind"] == "counts" and counts["reason"] is None
    assert release["kind"] == "release" and release["reason"] == cancelled["charge_note"]
    assert reserve["reason"] is None and "reason" not in release["event"]
    assert _job(api, job["id"]) == cancelled


def test_a_running_job_cancelled_before_its_read_mark_is_released(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    with session_scope(api.url) as session:  # claimed by a worker that died before reading
        session.get(Job, job["id"]).status = "running"
    flagged = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin)).json()
    assert flagged["status"] == "running" and flagged["charge"] == "reserved"
    api.run_worker(job["id"])  # the next attempt sees the request before its read mark
    done = _job(api, job["id"])
    assert done["status"] == "cancelled" and done["charge"] == "released"
    assert done["charged_epsilon"] == 0.0 and done["read_private_data"] is False
    assert [e["kind"] for e in _history(api, dataset_id)] == ["counts", "reserve", "release"]


def test_a_running_job_cancelled_after_reading_stays_charged(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    backend = CancelOnFirstCall(api, job["id"])
    api.run_worker(job["id"], backend)
    assert backend.cancelled
    done = _job(api, job["id"])
    assert done["status"] == "cancelled" and done["prompt_id"] is None
    assert done["charge"] == "charged" and done["charged_epsilon"] == done["epsilon"] > 0
    assert done["read_private_data"] is True
    assert "had read the private data when it was cancelled" in done["charge_note"]
    commit = _history(api, dataset_id)[-1]
    assert commit["kind"] == "commit" and commit["reason"] == done["charge_note"]


def test_a_succeeded_job_is_charged_and_a_late_cancel_changes_nothing(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    api.run_job(job["id"])
    done = _job(api, job["id"])
    assert done["status"] == "succeeded" and done["prompt_id"]
    assert done["charge"] == "charged" and done["charged_epsilon"] == done["epsilon"]
    assert "result" in done["charge_note"] and done["progress_note"] is None
    late = api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin))
    assert late.status_code == 409
    assert _job(api, job["id"])["charge"] == "charged"
    assert [e["kind"] for e in _history(api, dataset_id)] == ["counts", "reserve", "commit"]
    # The parameters it ran with: the client's, and the method's defaults.
    assert {k: done["params"][k] for k in FAST_PARAMS} == FAST_PARAMS
    assert set(done["params"]) == {p.name for p in get_method("tang").parameters}


def test_a_job_failed_after_reading_stays_charged(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    api.run_worker(job["id"], FailingBackend(stop_after=None))
    done = _job(api, job["id"])
    assert done["status"] == "failed" and done["error"].startswith("backend_rejected")
    assert done["charge"] == "charged" and done["charged_epsilon"] == done["epsilon"]
    assert done["read_private_data"] is True and "when it failed" in done["charge_note"]


def test_a_job_failed_before_reading_is_released(api: Api) -> None:
    dataset_id = _funded(api)
    api.queue.fail = True
    assert api.submit(dataset_id).status_code == 503
    [job] = api.client.get("/v1/jobs", headers=auth(api.admin)).json()
    assert job["status"] == "failed" and job["charge"] == "released"
    assert job["charged_epsilon"] == 0.0
    assert "failed before it read any private record" in job["charge_note"]


def test_a_succeeded_promptpate_job_reads_complete(api: Api) -> None:
    private = _funded(api, 5.0)
    # Far more public inputs than its budget of 20 answered queries pays for: it stops early.
    public = api.upload_public(public_rows(120))
    response = api.submit_pate(private, public["id"], params={**PATE_PARAMS, "max_public": 120})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    api.run_job(job_id, marker="Question:")
    with session_scope(api.url) as session:
        row = session.get(Job, job_id)
        assert row is not None and row.progress_done < row.progress_total == 120  # stopped early
    done = _job(api, job_id)
    progress, stats = done["progress"], done["stats"]
    assert done["status"] == "succeeded" and stats["budget_exhausted"] is True
    # Complete, not "56/120 public inputs (47%)": the count it got to is in the note and stats.
    assert progress == {"done": 120, "total": 120, "unit": "public inputs"}
    processed = int(stats["processed"])
    note = (
        f"complete: {processed} of 120 public inputs processed (the planned privacy "
        f"budget was spent first); {int(stats['answered'])} labelled, "
        f"{int(stats['rejected'])} refused by the Confident-GNMax threshold"
    )
    assert processed < 120 and done["progress_note"] == note
    assert JobPublic.model_validate(done).progress_text == note  # the pages'
    # `dpsyn jobs show` (its first line) and the dashboard's job page and status.
    assert f", progress 120/120 public inputs ({note})" in _describe_job(done)
    sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/jobs/{job_id}").text
    assert f'id="job-progress">{html.escape(note)}<' in page
    assert 'value="120" data-field="progress"' in page
    status = api.client.get(f"/ui/jobs/{job_id}/status").json()
    assert status["done"] == status["total"] == 120 and status["progress_text"] == note


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        (
            {"answered": 50, "rejected": 6, "budget_exhausted": True},
            "complete: 56 of 100 public inputs processed (the planned privacy budget was "
            "spent first); 50 labelled, 6 refused by the Confident-GNMax threshold",
        ),
        ({"answered": 100, "rejected": 0, "budget_exhausted": False}, None),
    ],
)
def test_the_promptpate_progress_note(stats: dict[str, Any], expected: str | None) -> None:
    done = 56 if expected else 100
    assert get_method("promptpate").progress_note(stats, done, 100) == expected
