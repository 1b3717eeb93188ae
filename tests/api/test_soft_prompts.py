"""A prompt set's soft prompt (PromptDPSGD's artifact) through the API: stored with the
prompt set by the workers' ``store_result``, its metadata in GET /v1/prompts/{id} and the
list, and its safetensors file at GET /v1/prompts/{id}/soft-prompt, with the prompt's auth and
tenant isolation.

The prompt sets here come from token-loop jobs run with the fake backend, with a soft prompt
of real bytes (random embeddings) attached to the result before it is stored: this tests the
storage and the API alone. The whole path, a promptdpsgd job on a real model, is in
``tests/api/test_promptdpsgd_e2e.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator

import numpy as np
import pytest

from app.db.models import Job, JobStatus, PromptSet
from app.db.session import session_scope
from app.promptdpsgd.artifact import SoftPrompt
from app.services.prompts import SoftPromptCorruptError
from tests.api.conftest import Api, auth, error_of, make_api


@pytest.fixture(params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API on each store: the bytes are a BLOB on SQLite, a bytea on PostgreSQL."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    yield from make_api(url)


def run_with_soft_prompt(api: Api, job_id: str, soft: SoftPrompt) -> None:
    """The real worker runs the job; its result gets the soft prompt before it is stored."""
    api.run_job(job_id, edit=lambda result: dataclasses.replace(result, soft_prompt=soft))


def soft_prompt(model: str = "fake", length: int = 4, hidden: int = 16) -> SoftPrompt:
    return SoftPrompt(model, np.random.default_rng(7).normal(size=(length, hidden)))


@pytest.fixture
def prompts(api: Api) -> tuple[str, str, SoftPrompt]:
    """(a prompt with a soft prompt, one without, the soft prompt)."""
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    soft = soft_prompt()
    with_soft, plain = (api.submit(dataset["id"]).json()["id"] for _ in range(2))
    run_with_soft_prompt(api, with_soft, soft)
    api.run_job(plain)
    jobs = {j["id"]: j for j in api.client.get("/v1/jobs", headers=auth(api.admin)).json()}
    return jobs[with_soft]["prompt_id"], jobs[plain]["prompt_id"], soft


def test_get_prompt_shows_the_soft_prompt_metadata(api: Api, prompts) -> None:
    soft_id, plain_id, soft = prompts
    for key in (api.admin, api.reader):
        body = api.client.get(f"/v1/prompts/{soft_id}", headers=auth(key)).json()
        assert body["soft_prompt"] == {
            "model": "fake",
            "length": 4,
            "hidden": 16,
            "sha256": soft.sha256,
            "download_url": f"/v1/prompts/{soft_id}/soft-prompt",
        }
        plain = api.client.get(f"/v1/prompts/{plain_id}", headers=auth(key)).json()
        assert plain["soft_prompt"] is None
    listed = {p["id"]: p for p in api.client.get("/v1/prompts", headers=auth(api.admin)).json()}
    assert listed[soft_id]["soft_prompt"]["sha256"] == soft.sha256
    assert listed[plain_id]["soft_prompt"] is None


def test_the_download_is_the_stored_file(api: Api, prompts) -> None:
    soft_id, _, soft = prompts
    for key in (api.admin, api.reader):
        response = api.client.get(f"/v1/prompts/{soft_id}/soft-prompt", headers=auth(key))
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/octet-stream"
        disposition = response.headers["content-disposition"]
        assert disposition == f'attachment; filename="{soft_id}.safetensors"'
        digest = hashlib.sha256(response.content).hexdigest()
        assert digest == soft.sha256 == response.headers["x-content-sha256"]
        assert response.headers["etag"] == f'"{digest}"'
        back = SoftPrompt.from_bytes(response.content)
        assert back.model == "fake" and np.array_equal(back.embeddings, soft.embeddings)


def test_the_download_is_404_for_other_tenants_unknown_ids_and_plain_prompts(
    api: Api, prompts
) -> None:
    soft_id, plain_id, _ = prompts
    other = api.client.get(f"/v1/prompts/{soft_id}/soft-prompt", headers=auth(api.other))
    assert other.status_code == 404 and error_of(other)["code"] == "not_found"
    unknown = api.client.get("/v1/prompts/nope/soft-prompt", headers=auth(api.admin))
    assert unknown.status_code == 404 and error_of(unknown)["code"] == "not_found"
    plain = api.client.get(f"/v1/prompts/{plain_id}/soft-prompt", headers=auth(api.reader))
    assert plain.status_code == 404
    error = error_of(plain)
    assert error["code"] == "no_soft_prompt"
    assert "has no soft prompt" in error["message"] and "tang" in error["message"]
    unauthenticated = api.client.get(f"/v1/prompts/{soft_id}/soft-prompt")
    assert unauthenticated.status_code == 401


def test_a_damaged_stored_file_is_never_served(api: Api, prompts) -> None:
    soft_id, _, _ = prompts
    with session_scope(api.url) as session:
        row = session.get(PromptSet, soft_id)
        assert row is not None and row.soft_prompt is not None
        row.soft_prompt = row.soft_prompt[:-1] + bytes([row.soft_prompt[-1] ^ 1])
    # The app answers 500 "internal error"; the test client re-raises the server's exception.
    with pytest.raises(SoftPromptCorruptError, match="fails its SHA-256"):
        api.client.get(f"/v1/prompts/{soft_id}/soft-prompt", headers=auth(api.admin))


def test_the_soft_prompt_outlives_its_datasets_deletion(api: Api, prompts) -> None:
    soft_id, _, soft = prompts
    dataset_id = api.client.get(f"/v1/prompts/{soft_id}", headers=auth(api.admin)).json()[
        "dataset_id"
    ]
    deleted = api.client.delete(f"/v1/datasets/{dataset_id}", headers=auth(api.admin))
    assert deleted.status_code == 200, deleted.text
    response = api.client.get(f"/v1/prompts/{soft_id}/soft-prompt", headers=auth(api.reader))
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == soft.sha256


def test_a_soft_prompt_for_another_model_is_not_stored(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    job_id = api.submit(dataset["id"]).json()["id"]
    with pytest.raises(ValueError, match="soft prompt is for model 'gemma-3-270m'"):
        run_with_soft_prompt(api, job_id, soft_prompt(model="gemma-3-270m"))
    with session_scope(api.url) as session:
        assert session.query(PromptSet).filter_by(job_id=job_id).count() == 0
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.FAILED and job.prompt_set_id is None


def test_the_openapi_document_declares_the_download(api: Api) -> None:
    document = api.client.get("/openapi.json").json()
    operation = document["paths"]["/v1/prompts/{prompt_id}/soft-prompt"]["get"]
    assert "application/octet-stream" in operation["responses"]["200"]["content"]
    assert {"401", "404", "422", "429", "503"} <= set(operation["responses"])
    assert "X-Content-SHA256" in operation["responses"]["200"]["headers"]
    complete = document["paths"]["/v1/prompts/{prompt_id}/complete"]["post"]
    assert "409" in complete["responses"]  # model_mismatch, backend_unsupported
    links = document["paths"]["/v1/prompts"]["get"]["responses"]["200"]["links"]
    assert operation["operationId"] in links


# --- /complete with a soft prompt: the refusals (the answers: the end-to-end test) ----------


def test_complete_refuses_a_soft_prompt_for_another_model_naming_both(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    job_id = api.submit(dataset["id"]).json()["id"]
    # As stored by a job that ran on gemma (the prompt set's model is the soft prompt's).
    gemma = soft_prompt(model="gemma-3-270m")
    api.run_job(
        job_id,
        edit=lambda result: dataclasses.replace(result, model=gemma.model, soft_prompt=gemma),
    )
    prompt_id = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()["prompt_id"]
    calls = len(api.backend.calls)
    query = "SECRETQUERY what is it"
    response = api.client.post(
        f"/v1/prompts/{prompt_id}/complete", json={"query": query}, headers=auth(api.reader)
    )
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "model_mismatch"
    assert "'gemma-3-270m'" in error["message"] and "'fake'" in error["message"]
    assert (error["prompt_model"], error["server_model"]) == ("gemma-3-270m", "fake")
    assert "SECRETQUERY" not in response.text
    assert len(api.backend.calls) == calls  # the model was never asked


def test_complete_refuses_a_soft_prompt_on_a_backend_without_embeddings(api: Api, prompts) -> None:
    """The test server's model is the fake backend (named like the soft prompt's model, but
    not a local transformers model): it cannot take input embeddings."""
    soft_id, plain_id, _ = prompts
    calls = len(api.backend.calls)
    response = api.client.post(
        f"/v1/prompts/{soft_id}/complete", json={"query": "q"}, headers=auth(api.admin)
    )
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "backend_unsupported"
    assert "local transformers backend" in error["message"]
    assert len(api.backend.calls) == calls
    plain = api.client.post(
        f"/v1/prompts/{plain_id}/complete", json={"query": "q"}, headers=auth(api.admin)
    )
    assert plain.status_code == 200  # demonstrations are answered as before


# --- submission: the registry's method and parameters reach the API ---------------------------


def test_a_promptdpsgd_job_is_admitted_with_its_own_parameters(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    params = {"steps": 5, "batch_size": 4, "prompt_length": 3, "init": "instruction"}
    submitted = api.submit(dataset["id"], method="promptdpsgd", epsilon=2.0, params=params)
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()
    assert job["method"] == "promptdpsgd"
    assert job["progress"] == {"done": 0, "total": 5, "unit": "steps"}
    assert job["shots"] == 0 and 0 < job["epsilon"] <= 2.0
    assert api.queue.enqueued == [job["id"]]
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    assert [e["kind"] for e in budget.json()["history"]] == ["counts", "reserve"]

    other = api.submit(dataset["id"], method="promptdpsgd", params={"M": 2})
    assert other.status_code == 422
    assert "params.M: a parameter of method tang or adadpsyn" in error_of(other)["message"]
    bad = api.submit(dataset["id"], method="promptdpsgd", params={"steps": 0})
    assert bad.status_code == 422 and "steps" in error_of(bad)["message"]
    document = api.client.get("/openapi.json").json()["components"]["schemas"]
    assert "promptdpsgd" in document["JobCreate"]["properties"]["method"]["enum"]
    assert "promptdpsgd" in document["JobParams"]["properties"]["steps"]["description"]


def test_reading_prompt_sets_does_not_load_the_bytes(api: Api, prompts) -> None:
    """The bytes are deferred: the queries behind GET and list leave them unloaded."""
    from sqlalchemy import inspect

    from app.services.prompts import get_prompt_set, list_prompt_sets

    soft_id, _, _ = prompts
    with session_scope(api.url) as session:
        tenant = session.get(PromptSet, soft_id).tenant_id  # type: ignore[union-attr]
        session.expunge_all()
        rows = [get_prompt_set(session, tenant, soft_id), *list_prompt_sets(session, tenant)]
        assert all("soft_prompt" in inspect(row).unloaded for row in rows)
        assert all("soft_prompt_sha256" not in inspect(row).unloaded for row in rows)
