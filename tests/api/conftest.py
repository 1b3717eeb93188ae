"""Helpers of the API tests: an app on a fresh database, a recording queue, a client that
keeps every response body (to prove that no record text ever leaves), and the real worker
(``workers.runner.run_job``) to run a job with the fake backend."""

from __future__ import annotations

import io
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from fastapi.testclient import TestClient

from app.db.models import Job, JobStatus, KeyScope
from app.db.session import session_scope
from app.llm.provider import BackendProvider, StaticProvider
from app.main import create_app
from app.results import SynthesisResult
from app.services.jobs import store_result
from app.services.record_reads import Reader, ReaderKind
from app.services.tenants import create_api_key, create_tenant
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend

#: Who a test's own read of records is (recorded as every read is).
TEST_READER = Reader.of(ReaderKind.JOB, "pytest")
MARKER = "PRIVATEMARKER"  # in every uploaded text; must never appear in a response
BOOTSTRAP_KEY = "bootstrap-key-for-the-api-tests-0123456789"

# A classification task whose labels are words the fake backend predicts (w{n} after n tokens
# past "Question:"; a query of three words and "\nType:" make five), so that /complete has
# a known answer.
TOY_TASK: dict[str, Any] = {
    "name": "toy",
    "kind": "classification",
    "instruction": "Given a type, write a question of that type.",
    "icl_instruction": "Classify the questions by type.",
    "text_field": "Question",
    "label_field": "Type",
    "labels": ["w5", "w7"],
}
# min_words 1: the fake backend writes one-word demonstrations (a rule with tests of its own,
# tests/synthesis/test_demonstration_rules.py), which these tests mean to serve.
FAST_PARAMS = {"M": 2, "N": 1, "tmax": 4, "K": 8, "min_words": 1}
PUBLIC = "PUBLICTEXT"  # in every public text: dataset responses must never show it
# A PromptPATE job that runs in a fraction of a second with the fake backend.
PATE_PARAMS = {"teachers": 4, "queries": 20, "candidates": 2, "group_size": 8}


_UPLOADS = itertools.count()


def toy_rows(n_per_label: int = 12, labels: tuple[str, ...] = ("w5", "w7")) -> list[dict]:
    """Records of their own on each call (a number in the first word, which keeps the word
    counts the fake backend answers by): a tenant's records uploaded again would be refused
    (records_seen, docs/privacy.md "Budgets follow the records")."""
    n = next(_UPLOADS)
    return [
        {"text": f"{MARKER}-{label}-{i}-{n} what is it", "label": label}
        for label in labels
        for i in range(n_per_label)
    ]


def public_rows(n: int = 40) -> list[dict]:
    """IMDB-like rows (a label and a rating the upload ignores). Three-word texts make the
    fake backend's teachers answer w5, five-word texts w7."""
    return [
        {
            "id": f"{i}_1",
            "text": f"{PUBLIC}{i} one two" if i % 2 else f"{PUBLIC}{i} one two three four",
            "label": i % 2,
            "rating": 7,
        }
        for i in range(n)
    ]


def csv_bytes(rows: list[dict], text: str = "text", label: str = "label") -> bytes:
    out = io.StringIO()
    out.write(f"{text},{label}\n")
    for row in rows:
        out.write(f'"{row["text"]}",{row["label"]}\n')
    return out.getvalue().encode()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class RecordingQueue:
    """Records enqueued job ids, checking that each job was committed before it was queued."""

    url: str
    enqueued: list[str] = field(default_factory=list)
    fail: bool = False

    def enqueue(self, job_id: str) -> None:
        with session_scope(self.url) as session:  # a separate connection sees commits only
            job = session.get(Job, job_id)
            assert job is not None and job.status == JobStatus.QUEUED
        if self.fail:
            raise ConnectionError("broker down")
        self.enqueued.append(job_id)


class RecordingClient(TestClient):
    """A test client that keeps the text of every response."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: list[str] = []

    def request(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        response = super().request(*args, **kwargs)
        self.bodies.append(response.text)
        return response

    def assert_no_private_text(self) -> None:
        leaked = [body[:200] for body in self.bodies if MARKER in body]
        assert not leaked, f"record text in responses: {leaked}"


@dataclass
class Api:
    client: RecordingClient
    url: str
    queue: RecordingQueue
    backend: FakeBackend
    admin: str  # tenant A's admin key (BOOTSTRAP_KEY is tenant "default"'s)
    reader: str  # tenant A's prompts:read key
    other: str  # tenant B's admin key

    def upload(
        self, rows: list[dict] | None = None, *, task: Any = TOY_TASK, key: str | None = None, **kw
    ) -> dict:
        body = {"task": task, "records": rows if rows is not None else toy_rows(), **kw}
        response = self.client.post("/v1/datasets", json=body, headers=auth(key or self.admin))
        assert response.status_code == 201, response.text
        return response.json()

    def counts_public(self, dataset_id: str, public: bool = True, key: str | None = None):
        """Declare the dataset's label counts public (or withdraw it): the owner's opt-in."""
        return self.client.put(
            f"/v1/datasets/{dataset_id}/counts-public",
            json={"public": public},
            headers=auth(key or self.admin),
        )

    def budget(self, dataset_id: str, epsilon: float = 3.0, key: str | None = None, **kw):
        return self.client.put(
            f"/v1/datasets/{dataset_id}/budget",
            json={"epsilon": epsilon, **kw},
            headers=auth(key or self.admin),
        )

    def submit(self, dataset_id: str, epsilon: float = 1.0, key: str | None = None, **kw):
        body = {
            "dataset_id": dataset_id,
            "method": "tang",
            "epsilon": epsilon,
            "shots": 2,
            "params": FAST_PARAMS,
            **kw,
        }
        return self.client.post("/v1/jobs", json=body, headers=auth(key or self.admin))

    def upload_public(self, rows: list[dict] | None = None, *, key: str | None = None) -> dict:
        body = {"public": True, "records": rows if rows is not None else public_rows()}
        response = self.client.post("/v1/datasets", json=body, headers=auth(key or self.admin))
        assert response.status_code == 201, response.text
        return response.json()

    def submit_pate(
        self, dataset_id: str, public_id: str | None = None, *, key: str | None = None, **kw
    ):
        body = {
            "dataset_id": dataset_id,
            "method": "promptpate",
            "public_dataset_id": public_id,
            "epsilon": 3.0,
            "shots": 2,
            "params": PATE_PARAMS,
            **kw,
        }
        return self.client.post("/v1/jobs", json=body, headers=auth(key or self.admin))

    def run_worker(self, job_id: str, backend: FakeBackend | None = None) -> None:
        """The real runner (any method), with the fake backend."""
        from workers.runner import run_job

        run_job(
            job_id,
            database_url=self.url,
            provider=StaticProvider(backend or FakeBackend(stop_after=None)),
            progress_interval_s=0.0,
        )

    def run_job(
        self,
        job_id: str,
        marker: str = "Question:",
        *,
        edit: Callable[[SynthesisResult], SynthesisResult] | None = None,
    ) -> None:
        """Run a queued job to success through the real worker (claim, lease, the check of the
        stored plan against the reserved event, the record count, the charge), on the fake
        backend whose teachers answer after ``marker`` (the task's text field: "Sentence:" for
        SST-2) and stop after three words. Fails the test if the job does not succeed.

        ``edit`` changes the result just before the worker stores it (a test attaches a soft
        prompt so). The worker records an error in storing it by type name only; it is
        raised here, so that a test can check what was refused and why."""
        errors: list[Exception] = []

        def store(session: Any, job: Job, result: SynthesisResult) -> Any:
            try:
                return store_result(session, job, edit(result) if edit is not None else result)
            except Exception as err:
                errors.append(err)
                raise

        with mock.patch("workers.runner.store_result", store):
            self.run_worker(job_id, FakeBackend(marker=marker))
        if errors:
            raise errors[0]
        with session_scope(self.url) as session:
            job = session.get(Job, job_id)
            assert job is not None, job_id
            assert job.status == JobStatus.SUCCEEDED, (job.status, job.error)


def make_api(url: str, provider: BackendProvider | None = None, **settings: Any) -> Iterator[Api]:
    """An app on ``url`` with two fresh tenants; yields inside the app's lifespan. Its model
    is ``provider``'s, by default the fake backend's (``Api.backend``)."""
    queue = RecordingQueue(url)
    backend = FakeBackend(stop_after=None)  # answers /complete; never predicts a newline
    app = create_app(
        Settings(database_url=url, bootstrap_api_key=BOOTSTRAP_KEY, **settings),
        queue=queue,
        backend_provider=provider or StaticProvider(backend),
    )
    with RecordingClient(app) as client:  # runs the lifespan: migrations, bootstrap key
        suffix = uuid.uuid4().hex[:8]
        with session_scope(url) as session:
            tenant_a, admin = create_tenant(session, f"tenant-a-{suffix}")
            _, reader = create_api_key(session, tenant_a.id, KeyScope.PROMPTS_READ)
            _, other = create_tenant(session, f"tenant-b-{suffix}")
        yield Api(client, url, queue, backend, admin, reader, other)
        client.assert_no_private_text()


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message"} <= set(body["error"]), body
    return body["error"]


def dumps(value: Any) -> str:
    return json.dumps(value)
