"""PromptDPSGD end to end through the embedded server, on the real default model.

The app is built as ``dpsyn serve`` builds it (``create_app`` with the default settings: the
local transformers backend, Gemma-3-270M, the in-process worker sharing the model with
``/complete``, SQLite). A client uploads a small labelled dataset, sets a budget, submits a
promptdpsgd job with tiny parameters and waits for it; then reads the prompt, downloads the
soft prompt, answers a query with it and checks the ledger. Also: cancellation between steps,
and ``/complete`` with a soft prompt checked against the scorer run directly.
"""

from __future__ import annotations

import hashlib
import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from app.db.models import Job, JobStatus, PromptSet
from app.db.session import session_scope
from app.llm.factory import BackendKind
from app.llm.models import DEFAULT_MODEL
from app.main import create_app
from app.promptdpsgd.artifact import SoftPrompt
from app.services.jobs import attach_soft_prompt
from app.services.tenants import create_tenant
from app.settings import Settings
from app.synthesis.scoring import label_scores
from app.synthesis.tasks import BUILTIN_TASKS
from tests.api.conftest import MARKER, RecordingClient, auth, error_of
from tests.conftest import require_model

KEY = "promptdpsgd-e2e-admin-key-0123456789abcdef"
POSITIVE = [
    "a wonderful film",
    "great acting and a moving story",
    "I loved every minute",
    "a delight from start to end",
    "brilliant and funny",
    "superb direction",
]
NEGATIVE = ["a dull mess", "boring and far too long", "I hated the ending",
            "a waste of time", "poorly acted and silly", "terrible script"]  # fmt: skip
# A promptdpsgd job that takes a few seconds on the CPU.
# (Each step computes one gradient per sampled record: about a second each on 2 CPU cores.)
TINY: dict[str, Any] = {"steps": 2, "batch_size": 2, "prompt_length": 2}
QUERY = "an amazing and touching movie"


_UPLOADS = itertools.count()


def rows() -> list[dict[str, str]]:
    """Records of their own on each call: a tenant's records uploaded again are refused
    (records_seen, docs/privacy.md "Budgets follow the records")."""
    n = next(_UPLOADS)
    return [
        {"text": f"{text} {MARKER}{i}x{n}", "label": label}
        for label, texts in (("positive", POSITIVE), ("negative", NEGATIVE))
        for i, text in enumerate(texts)
    ]


@dataclass
class Server:
    client: RecordingClient
    url: str
    admin: dict[str, str]
    other: dict[str, str]

    def wait(self, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.client.get(f"/v1/jobs/{job_id}", headers=self.admin).json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            assert time.monotonic() < deadline, job
            time.sleep(0.2)

    def dataset(self, epsilon: float = 10.0) -> str:
        body = {"task": "sst2", "records": rows()}
        created = self.client.post("/v1/datasets", json=body, headers=self.admin)
        assert created.status_code == 201, created.text
        dataset_id = created.json()["id"]
        budget = self.client.put(
            f"/v1/datasets/{dataset_id}/budget", json={"epsilon": epsilon}, headers=self.admin
        )
        assert budget.status_code == 200, budget.text
        return dataset_id


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_model()  # the default settings below load the packaged Gemma
    url = f"sqlite:///{tmp_path_factory.mktemp('e2e') / 'dpsyn.db'}"
    # The embedded defaults, spelled out so that no DPSYN_* variable of the environment
    # changes them: the local model, no broker (the in-process worker), SQLite.
    settings = Settings(
        database_url=url,
        bootstrap_api_key=KEY,
        backend=BackendKind.TRANSFORMERS,
        model=DEFAULT_MODEL,
        broker_url=None,
    )
    app = create_app(settings)
    try:
        with RecordingClient(app) as client:
            with session_scope(url) as session:
                _, other = create_tenant(session, f"other-{uuid.uuid4().hex[:8]}")
            yield Server(client, url, auth(KEY), auth(other))
            client.assert_no_private_text()
    finally:
        app.state.queue.close()


@dataclass
class Finished:
    dataset_id: str
    job: dict[str, Any]
    prompt: dict[str, Any]
    file: bytes


@pytest.fixture(scope="module")
def finished(server: Server) -> Finished:
    """A promptdpsgd job run to the end through the API."""
    dataset_id = server.dataset()
    submitted = server.client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "method": "promptdpsgd", "epsilon": 4.0, "params": TINY},
        headers=server.admin,
    )
    assert submitted.status_code == 201, submitted.text
    queued = submitted.json()
    assert queued["method"] == "promptdpsgd" and queued["progress"]["total"] == TINY["steps"]
    job = server.wait(queued["id"])
    assert job["status"] == "succeeded", job
    prompt = server.client.get(f"/v1/prompts/{job['prompt_id']}", headers=server.admin)
    assert prompt.status_code == 200, prompt.text
    download = server.client.get(prompt.json()["soft_prompt"]["download_url"], headers=server.admin)
    assert download.status_code == 200, download.text
    return Finished(dataset_id, job, prompt.json(), download.content)


def test_the_job_runs_every_step_and_is_charged_its_epsilon(
    server: Server, finished: Finished
) -> None:
    job = finished.job
    steps = TINY["steps"]
    assert job["progress"] == {"done": steps, "total": steps, "unit": "steps"}
    assert job["error"] is None and job["prompt_id"] is not None
    budget = server.client.get(
        f"/v1/datasets/{finished.dataset_id}/budget", headers=server.admin
    ).json()
    # the dataset's count release, drawn for the job's plan and charged once, then the job
    assert [e["kind"] for e in budget["history"]] == ["counts", "reserve", "commit"]
    assert budget["history"][2]["job_id"] == job["id"]
    assert job["count_release_id"] == budget["count_releases"][0]["id"]
    assert 0 < job["epsilon"] <= 4.0
    counts = budget["counts_epsilon"]
    assert counts == pytest.approx(0.05 * 10.0, rel=1e-3)
    # (the tight composition: the job at the budget's delta less the release's, a little above
    # its own; alone after the release, the ledger's one-batch rule at half the delta)
    assert budget["composed"] == pytest.approx(job["epsilon"] + counts, rel=1e-2)
    assert budget["rule"] == "one_batch" and budget["spent"] > budget["composed"]
    assert budget["remaining"] == pytest.approx(10.0 - budget["spent"], rel=1e-9)
    assert budget["remaining"] < budget["epsilon"]


def test_the_prompt_carries_the_soft_prompt_and_the_file_is_it(
    server: Server, finished: Finished
) -> None:
    prompt, data = finished.prompt, finished.file
    assert prompt["method"] == "promptdpsgd" and prompt["model"] == "gemma-3-270m"
    assert prompt["epsilon"] == finished.job["epsilon"]
    soft = prompt["soft_prompt"]
    assert soft["model"] == "gemma-3-270m" and soft["length"] == TINY["prompt_length"]
    assert soft["hidden"] == 640  # Gemma-3-270M's embedding width
    assert hashlib.sha256(data).hexdigest() == soft["sha256"]
    loaded = SoftPrompt.from_bytes(data)
    assert loaded.model == "gemma-3-270m" and loaded.embeddings.shape == (2, 640)
    assert loaded.sha256 == soft["sha256"]
    listed = server.client.get("/v1/prompts", headers=server.admin).json()
    assert {p["id"]: p["soft_prompt"] for p in listed}[prompt["id"]] == soft


def test_complete_answers_with_the_soft_prompt_on_the_model(
    server: Server, finished: Finished
) -> None:
    """/complete gives what the scorer gives on the soft-prompted model, which is not what
    the bare model gives (the embeddings are used)."""
    from app.promptdpsgd.backend import SoftPromptedBackend

    prompt = finished.prompt
    response = server.client.post(
        f"/v1/prompts/{prompt['id']}/complete", json={"query": QUERY}, headers=server.admin
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert QUERY not in response.text
    assert set(answer["scores"]) == {"negative", "positive"}
    assert sum(answer["scores"].values()) == pytest.approx(1.0, abs=1e-6)
    assert answer["label"] == max(answer["scores"], key=answer["scores"].get)

    provider = server.client.app.state.backend_provider  # type: ignore[attr-defined]
    task = BUILTIN_TASKS["sst2"]
    with provider.use_lock:
        model = provider.get()
        soft = SoftPromptedBackend(model, SoftPrompt.from_bytes(finished.file))
        direct = label_scores(soft, task, prompt["prompt"], QUERY)
        bare = label_scores(model, task, prompt["prompt"], QUERY)
    assert answer["scores"] == pytest.approx(direct, abs=1e-5)
    assert abs(bare["positive"] - direct["positive"]) > 1e-4


def test_the_download_is_isolated_by_tenant(server: Server, finished: Finished) -> None:
    path = finished.prompt["soft_prompt"]["download_url"]
    other = server.client.get(path, headers=server.other)
    assert other.status_code == 404 and error_of(other)["code"] == "not_found"
    meta = server.client.get(f"/v1/prompts/{finished.prompt['id']}", headers=server.other)
    assert meta.status_code == 404
    answer = server.client.post(
        f"/v1/prompts/{finished.prompt['id']}/complete",
        json={"query": QUERY},
        headers=server.other,
    )
    assert answer.status_code == 404


def test_a_soft_prompt_of_another_width_is_refused_by_complete(
    server: Server, finished: Finished
) -> None:
    """A prompt set whose soft prompt names the server's model but has another hidden size
    (trained on another model stored under the same name): 409, not a shape error."""
    with session_scope(server.url) as session:
        job = session.get(Job, finished.job["id"])
        source = session.get(PromptSet, finished.prompt["id"])
        assert job is not None and source is not None
        copy = Job(
            **{c.name: getattr(job, c.name) for c in Job.__table__.columns if c.name != "id"}
        )
        session.add(copy)
        session.flush()
        columns = [c.name for c in PromptSet.__table__.columns if not c.name.startswith("soft")]
        clone = PromptSet(
            **{name: getattr(source, name) for name in columns if name not in ("id", "job_id")},
            job_id=copy.id,
        )
        attach_soft_prompt(clone, SoftPrompt("gemma-3-270m", np.ones((2, 320))))
        session.add(clone)
        session.flush()
        clone_id = clone.id
    response = server.client.post(
        f"/v1/prompts/{clone_id}/complete", json={"query": QUERY}, headers=server.admin
    )
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "model_mismatch" and "320" in error["message"]
    assert QUERY not in response.text


def test_a_running_job_shows_its_steps_and_stops_between_two_when_cancelled(
    server: Server, finished: Finished
) -> None:
    """Also: /complete, on the model the job is training with, answers as when it is idle."""
    complete = f"/v1/prompts/{finished.prompt['id']}/complete"
    idle = server.client.post(complete, json={"query": QUERY}, headers=server.admin).json()
    dataset_id = server.dataset()
    params = {**TINY, "steps": 500}
    submitted = server.client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "method": "promptdpsgd", "epsilon": 4.0, "params": params},
        headers=server.admin,
    )
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    deadline = time.monotonic() + 60
    while True:  # the first steps are written as they finish
        job = server.client.get(f"/v1/jobs/{job_id}", headers=server.admin).json()
        if job["progress"]["done"] >= 1:
            break
        assert job["status"] in ("queued", "running") and time.monotonic() < deadline, job
        time.sleep(0.1)
    assert job["status"] == "running" and job["progress"]["total"] == 500
    busy = server.client.post(complete, json={"query": QUERY}, headers=server.admin)
    assert busy.status_code == 200, busy.text
    assert busy.json()["scores"] == pytest.approx(idle["scores"], abs=1e-5)
    cancel = server.client.post(f"/v1/jobs/{job_id}/cancel", headers=server.admin)
    assert cancel.status_code == 200 and cancel.json()["cancel_requested"] is True
    job = server.wait(job_id, timeout=30)
    assert job["status"] == "cancelled" and job["prompt_id"] is None
    assert 1 <= job["progress"]["done"] < 500
    budget = server.client.get(f"/v1/datasets/{dataset_id}/budget", headers=server.admin).json()
    # It read the private data, so its charge stands.
    assert [e["kind"] for e in budget["history"]] == ["counts", "reserve", "commit"]
    assert budget["composed"] == pytest.approx(job["epsilon"] + budget["counts_epsilon"], rel=1e-2)
    assert budget["spent"] >= budget["composed"]
    with session_scope(server.url) as session:
        assert session.get(Job, job_id).status == JobStatus.CANCELLED  # type: ignore[union-attr]
