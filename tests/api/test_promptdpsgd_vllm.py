"""PromptDPSGD on a server whose model is the vLLM HTTP backend: a promptdpsgd job is refused
at submission (409 ``backend_unsupported``, nothing stored, nothing reserved), a soft prompt
is refused by ``/complete`` without a call to the server, and a worker on vLLM fails such a
job before it reads a record (its reservation released).

The vLLM server is a closed loopback port: nothing here may need it to answer (a prompt made
of demonstrations does need it, and gets the 503 of a backend that is down).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from app.db.models import Job, LedgerEntry
from app.db.session import session_scope
from app.llm.factory import BackendKind
from app.llm.provider import BackendProvider
from app.promptdpsgd.artifact import SoftPrompt
from tests.api.conftest import Api, auth, error_of, make_api

DEAD = "http://127.0.0.1:9/v1"  # the discard port: refused at once


def vllm_provider() -> BackendProvider:
    return BackendProvider(BackendKind.VLLM, model="served-model", url=DEAD)


@pytest.fixture
def vllm_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url, provider=vllm_provider())


def ledger_rows(url: str, dataset_id: str) -> list[str]:
    with session_scope(url) as session:
        rows = (
            session.query(LedgerEntry)
            .filter_by(dataset_id=dataset_id)
            .order_by(LedgerEntry.id)
            .all()
        )
        return [row.kind for row in rows]


def test_a_promptdpsgd_job_is_refused_at_submission_and_reserves_nothing(vllm_api: Api) -> None:
    api = vllm_api
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    response = api.submit(dataset["id"], method="promptdpsgd", params=None)
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "backend_unsupported"
    assert "local transformers backend" in error["message"] and "vLLM" in error["message"]
    assert api.queue.enqueued == [] and ledger_rows(api.url, dataset["id"]) == []
    assert api.client.get("/v1/jobs", headers=auth(api.admin)).json() == []
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    assert budget.json()["spent"] == 0
    # The other methods still run on vLLM.
    assert api.submit(dataset["id"]).status_code == 201


def test_complete_refuses_a_soft_prompt_without_calling_the_server(vllm_api: Api) -> None:
    api = vllm_api
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    soft_job, plain_job = (api.submit(dataset["id"]).json()["id"] for _ in range(2))
    soft = SoftPrompt("served-model", np.ones((2, 8)))
    api.run_job(
        soft_job,
        edit=lambda result: dataclasses.replace(result, model=soft.model, soft_prompt=soft),
    )
    api.run_job(plain_job)
    jobs = {j["id"]: j for j in api.client.get("/v1/jobs", headers=auth(api.admin)).json()}
    response = api.client.post(
        f"/v1/prompts/{jobs[soft_job]['prompt_id']}/complete",
        json={"query": "q"},
        headers=auth(api.reader),
    )
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "backend_unsupported" and "vLLM" in error["message"]
    plain = api.client.post(
        f"/v1/prompts/{jobs[plain_job]['prompt_id']}/complete",
        json={"query": "q"},
        headers=auth(api.reader),
    )
    assert plain.status_code == 503 and error_of(plain)["code"] == "backend_unavailable"
    # The soft prompt itself is still there to download.
    download = api.client.get(
        f"/v1/prompts/{jobs[soft_job]['prompt_id']}/soft-prompt", headers=auth(api.reader)
    )
    assert download.status_code == 200 and download.content == soft.to_bytes()


def test_a_worker_on_vllm_fails_the_job_before_it_reads_a_record(api: Api) -> None:
    """Admitted by an API on a local model, run by a worker on vLLM (configured unlike its
    API): failed with the reason, never touched the data, reservation released."""
    from workers.runner import run_job

    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    params = {"steps": 2, "batch_size": 4, "prompt_length": 2}
    submitted = api.submit(dataset["id"], method="promptdpsgd", params=params)
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    run_job(job_id, database_url=api.url, provider=vllm_provider(), progress_interval_s=0)
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    assert job["status"] == "failed" and job["prompt_id"] is None
    assert "local transformers backend" in job["error"] and "vLLM" in job["error"]
    with session_scope(api.url) as session:
        row = session.get(Job, job_id)
        assert row is not None and row.touched_data is False
    # the job is given back; the dataset's count release its plan drew stays charged
    assert ledger_rows(api.url, dataset["id"]) == ["counts", "reserve", "release"]


def test_the_planners_quote_refuses_it_too(vllm_api: Api) -> None:
    """The dashboard quotes a job with the same checks as a submission (``plan_submission``)."""
    from app.db.models import Dataset
    from app.services.errors import ConflictError
    from app.services.job_request import JobRequest
    from app.services.jobs import quote_job

    api = vllm_api
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    with session_scope(api.url) as session:
        row = session.get(Dataset, dataset["id"])
        assert row is not None
        asked = JobRequest(dataset_id=row.id, method="promptdpsgd", epsilon=1.0)
        tenant = row.tenant_id
        with pytest.raises(ConflictError, match="needs the local transformers backend"):
            quote_job(session, asked, tenant_id=tenant, backend=BackendKind.VLLM)
        quote = quote_job(session, asked, tenant_id=tenant, backend=BackendKind.TRANSFORMERS)
        assert 0 < quote.epsilon <= 1.0 and quote.fits
