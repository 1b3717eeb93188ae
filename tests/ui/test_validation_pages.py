"""The dashboard's side of issue 24's validation set and submitter: the job form offers the
tenant's labelled public datasets of the task's labels as a validation set, a job submitted
from it records both the set and the signed-in key, the job page shows them, and the prompt
page shows the score (or that it is pending)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from unittest import mock

import pytest

from app.db.models import Job, PromptSet
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.llm.retry import RetryPolicy
from tests.api.conftest import Api, auth, make_api
from tests.api.test_validation import VALID, upload_validation
from tests.synthesis.fake_backend import FakeBackend
from tests.ui.test_pages import funded, job_form, key_id_of, sign_in
from workers import runner


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def _text(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</dd>', page, re.S)
    assert match, element_id
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", match.group(1))).split())


def _span(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</span>', page, re.S)
    assert match, element_id
    return " ".join(html.unescape(match.group(1)).split())


def _submit_from_the_form(api: Api) -> tuple[dict, dict]:
    """A job submitted from the dataset page's form with the validation set chosen."""
    dataset_id = funded(api, 5.0)
    validation = upload_validation(api)
    csrf = sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/datasets/{dataset_id}").text
    offered = re.search(r'<select name="validation_dataset_id".*?</select>', page, re.S)
    assert offered and f'value="{validation["id"]}"' in offered.group(0)
    assert api.upload_public()["id"] not in offered.group(0)  # unlabelled: not offered
    form = job_form(dataset_id, csrf, validation_dataset_id=validation["id"])
    response = api.client.post("/ui/jobs", data=form, follow_redirects=False)
    assert response.status_code == 303, response.text
    job_id = response.headers["location"].rsplit("/", 1)[-1]
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    return job, validation


def test_the_form_records_the_validation_set_and_the_signed_in_key(api: Api) -> None:
    job, validation = _submit_from_the_form(api)
    assert job["validation_dataset_id"] == validation["id"]
    assert job["submitted_by"] == key_id_of(api, api.admin)
    page = api.client.get(f"/ui/jobs/{job['id']}").text
    assert _text(page, "job-submitter") == f"key {job['submitted_by']}"
    assert f'href="/ui/datasets/{validation["id"]}" id="job-validation-dataset"' in page


def test_the_prompt_page_shows_the_score_or_that_it_is_pending(api: Api) -> None:
    job, validation = _submit_from_the_form(api)
    with mock.patch.object(runner, "_validate"):
        api.run_worker(job["id"])
    prompt_id = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]
    page = api.client.get(f"/ui/prompts/{prompt_id}").text
    assert _text(page, "prompt-validation").startswith("pending")

    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        session.expunge(row)
    runner._validate(row, api.url, StaticProvider(FakeBackend(stop_after=None)), RetryPolicy())
    page = api.client.get(f"/ui/prompts/{prompt_id}").text
    shown = _text(page, "prompt-validation")
    assert shown.startswith("accuracy 0.750 on 4 records")
    assert validation["id"] in shown and VALID not in page
    # beside its baselines, with the verdict in words (issue 33)
    assert _span(page, "prompt-zero-shot") == "0.750" and _span(page, "prompt-majority") == "0.500"
    assert _span(page, "prompt-verdict") == (
        "This prompt cannot tell on 4 records: level with zero-shot, within the ±0.500 that 4 "
        "records allow."
    )
    assert 'data-outcome="cannot_tell" class="level-text-warn">This prompt' in page
    listed = api.client.get("/ui/prompts?sort=validation").text
    assert "0.750" in listed and 'data-outcome="cannot_tell"' in listed


@pytest.mark.parametrize(
    ("accuracy", "outcome", "words"),
    [(0.292, "behind", "behind"), (0.396, "cannot_tell", "cannot tell"), (0.9, "ahead", "ahead")],
)
def test_the_pages_mark_the_score_as_the_verdict_says(
    api: Api, accuracy: float, outcome: str, words: str
) -> None:
    """Issue 55: the list marked only a score below zero-shot, by a plain comparison, and the
    page highlighted any score at or under zero-shot, whatever the records could tell."""
    job, _ = _submit_from_the_form(api)
    with mock.patch.object(runner, "_validate"):
        api.run_worker(job["id"])
    prompt_id = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]
    with session_scope(api.url) as session:
        row = session.get(PromptSet, prompt_id)
        assert row is not None
        baselines = {"zero_shot": 0.458, "majority": 0.25, "majority_label": "w5"}
        row.validation = {**(row.validation or {}), "status": "scored", "n": 48,
                          "accuracy": accuracy, "baselines": baselines}  # fmt: skip
    api_view = api.client.get(f"/v1/prompts/{prompt_id}", headers=auth(api.admin)).json()
    page = api.client.get(f"/ui/prompts/{prompt_id}").text
    assert _span(page, "prompt-verdict") == f"This prompt {api_view['validation']['verdict']}."
    assert f'id="prompt-verdict" data-outcome="{outcome}"' in page
    listed = api.client.get("/ui/prompts").text
    mark = re.search(rf'data-outcome="{outcome}"[^>]*>([^<]*)</span>', listed)
    assert mark and mark.group(1) == words


def test_a_job_without_a_submitter_says_so(api: Api) -> None:
    dataset_id = funded(api)
    job = api.submit(dataset_id).json()

    with session_scope(api.url) as session:  # as a job made outside the API
        row = session.get(Job, job["id"])
        assert row is not None
        row.submitted_by = None
    sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/jobs/{job['id']}").text
    assert _text(page, "job-submitter") == "not recorded"
    assert 'id="job-validation-dataset"' not in page
