"""No private text in a job's error, whatever the model backend says (issue 21, part 1).

Real model servers quote their input in validation errors, and a backend's exception may carry
a prompt in its message or in the exceptions it was raised from. Each job here runs on the real
runner against a backend that fails on a prompt holding a record's canary and quotes it back
in one style: whole, a partial window, truncated, ``repr``-escaped, JSON-escaped, as token ids,
in a FastAPI ``detail`` list, in a plain-text body, in a 5xx that is retried, or in the
message and the ``__cause__`` chain of a Python backend's exception. Then every surface that
shows a job is searched: the jobs API, the dashboard's job, jobs, dataset pages and the job
status endpoint, the database row itself, everything logged (API and worker) and everything
written to stdout/stderr. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import select

from app.db.models import Job
from app.db.session import session_scope
from app.llm.base import BackendError, TransientBackendError
from app.llm.provider import StaticProvider
from app.llm.retry import RetryPolicy
from app.llm.vllm_http import VLLMHttpBackend
from tests.api.conftest import FAST_PARAMS, TOY_TASK
from tests.api.test_private_text import CANARY, Served, _rows
from tests.llm.test_vllm_http import (
    MODEL,
    FakeState,
    FakeVLLMHandler,
    _FakeHTTPServer,
    toy_text,
)
from tests.synthesis.fake_backend import FakeBackend
from workers.runner import run_job

# The canary as the toy server's token ids (one per character), in any separator.
CANARY_IDS = re.compile(r"\D+".join(str(ord(c)) for c in CANARY))
# What a quoted prompt looks like in each style; ``text`` is the whole prompt the server got.
Quote = Callable[[str], tuple[int, str, bytes]]


def _error_body(status: int, message: str, **extra: Any) -> tuple[int, str, bytes]:
    error = {"message": message, "type": "BadRequestError", "param": None, "code": status}
    return status, "application/json", json.dumps({"error": {**error, **extra}}).encode()


def _window(text: str, before: int, after: int) -> str:
    at = text.index(CANARY)
    return text[max(0, at - before) : at + len(CANARY) + after]


STYLES: dict[str, Quote] = {
    "whole": lambda text: _error_body(400, f"cannot tokenize {text}"),
    "partial": lambda text: _error_body(400, f"cannot tokenize '…{_window(text, 30, 20)}…'"),
    "truncated": lambda text: _error_body(
        400, f"prompt too long: {text[: text.index(CANARY) + len(CANARY) + 3]}..."
    ),
    "repr": lambda text: _error_body(400, f"invalid input {text!r}"),
    "json": lambda text: _error_body(400, f"invalid input {json.dumps(text)}"),
    "ascii-json": lambda text: _error_body(400, json.dumps({"input": text}, ensure_ascii=True)),
    "ids": lambda text: _error_body(400, "bad tokens " + ";".join(str(ord(c)) for c in text)),
    "param": lambda text: _error_body(400, "invalid prompt", param=_window(text, 5, 5)),
    "detail": lambda text: (
        422,
        "application/json",
        json.dumps(
            {"detail": [{"loc": ["body", "prompt"], "msg": "bad", "input": _window(text, 9, 9)}]}
        ).encode(),
    ),
    "plain": lambda text: (400, "text/plain", f"Bad Request: {_window(text, 3, 40)}".encode()),
    "unavailable": lambda text: _error_body(503, f"engine died on {_window(text, 12, 12)}"),
}


@dataclass
class Leak:
    """Which endpoint fails on the canary, and how it quotes the prompt."""

    endpoint: str  # "/tokenize" or "/v1/completions"
    quote: Quote


@dataclass
class EchoState(FakeState):
    leak: Leak | None = None
    echoed: int = 0  # answers that quoted a prompt


class EchoingHandler(FakeVLLMHandler):
    """The toy vLLM server of the HTTP client's tests, quoting any prompt with the canary."""

    def _tokenize(self, body: dict[str, Any]) -> None:
        if not self._leaked("/tokenize", str(body.get("prompt", ""))):
            super()._tokenize(body)

    def _completions(self, body: dict[str, Any]) -> None:
        rows = ["".join(toy_text(t) for t in row) for row in body["prompt"]]
        if not self._leaked("/v1/completions", "\n".join(rows)):
            super()._completions(body)

    def _leaked(self, endpoint: str, text: str) -> bool:
        leak = self.state.leak if isinstance(self.state, EchoState) else None
        if leak is None or leak.endpoint != endpoint or CANARY not in text:
            return False
        status, kind, data = leak.quote(text)
        self.state.echoed += 1
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return True


@pytest.fixture
def echoing_server() -> Iterator[tuple[str, EchoState]]:
    httpd = _FakeHTTPServer(("127.0.0.1", 0), EchoingHandler)
    httpd.state = state = EchoState()
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _prompt_text(backend: FakeBackend, prompts: Sequence[Sequence[int]]) -> str:
    return "\n".join(backend.detokenize(p) for p in prompts)


class RaisingBackend(FakeBackend):
    """A Python backend whose exceptions quote the prompt, in their message and their causes."""

    def __init__(self, make: Callable[[str], Exception]) -> None:
        super().__init__(stop_after=None)
        self.make = make
        self.raised = 0

    def next_token_probs(self, prompts: Sequence[Sequence[int]], token_sets: Any) -> np.ndarray:
        text = _prompt_text(self, prompts)
        if CANARY in text:
            self.raised += 1
            raise self.make(text)
        return super().next_token_probs(prompts, token_sets)


def _chained(outer: Callable[[str], Exception], inner: Callable[[str], Exception]):
    def make(text: str) -> Exception:
        error = outer(text)
        error.__cause__ = inner(f"while reading {text!r}")
        error.__context__ = KeyError(text)
        return error

    return make


PYTHON_STYLES: dict[str, tuple[Callable[[str], Exception], str]] = {
    "final-chain": (
        _chained(lambda text: BackendError(f"cannot score {text}"), ValueError),
        r"backend_failed: the model backend could not answer \(BackendError\)",
    ),
    "transient-chain": (
        _chained(lambda text: TransientBackendError(f"timed out on {text!r}"), TimeoutError),
        r"backend_unreachable: .*",
    ),
    "httpx": (
        lambda text: httpx.ReadError(f"lost connection while sending {text}"),
        r"backend_unreachable: .*",
    ),
    "unexpected-chain": (
        _chained(lambda text: RuntimeError(f"oops {json.dumps(text)}"), UnicodeError),
        r"internal error \(RuntimeError\) in job .*; see the worker log",
    ),
}
EXPECTED_HTTP = {
    "unavailable": r"backend_unavailable: the model server did not answer .*\(HTTP 503\)",
    "detail": r"backend_rejected: the model server refused the request \(HTTP 422\)",
}
DEFAULT_HTTP = r"backend_rejected: the model server refused the request \(HTTP 400\)"


@dataclass
class Case:
    name: str
    provider: StaticProvider
    expected: str  # the job's error, a regular expression
    leaks: Callable[[], int]  # how many times the backend has quoted a prompt so far


def _cases(url: str, state: EchoState) -> Iterator[Case]:
    """One job's backend per style; the server's leak is set as each is handed out."""
    for endpoint in ("/tokenize", "/v1/completions"):
        for name, quote in STYLES.items():
            state.leak = Leak(endpoint, quote)
            # a generous timeout: under a loaded test run a timed-out request would fail the
            # job before the server could quote anything
            backend = VLLMHttpBackend(url=url, model=MODEL, timeout=30.0)
            expected = EXPECTED_HTTP.get(name, DEFAULT_HTTP)
            yield Case(
                f"{endpoint} {name}", StaticProvider(backend), expected, lambda: state.echoed
            )
    state.leak = None
    for name, (make, expected) in PYTHON_STYLES.items():
        raising = RaisingBackend(make)
        yield Case(name, StaticProvider(raising), expected, lambda raising=raising: raising.raised)


def _views(served: Served, dataset_id: str, job_ids: list[str]) -> list[tuple[str, str]]:
    """Every API and dashboard view that shows these jobs: (what, body)."""
    api = served.client
    bodies = [("GET /v1/jobs", api.get("/v1/jobs", params={"limit": 100}).text)]
    bodies += [(f"GET /v1/jobs/{j}", api.get(f"/v1/jobs/{j}").text) for j in job_ids]
    bodies.append(("GET /v1/datasets", api.get("/v1/datasets").text))
    budget = f"/v1/datasets/{dataset_id}/budget"  # the budget views (issue 24)
    for path in (budget, budget + "/ledger.csv", "/v1/budgets", "/v1/budgets?over_threshold=1"):
        bodies.append((f"GET {path}", api.get(path).text))
    ui = served.ui()
    try:
        pages = ["/ui/jobs", "/ui/datasets", f"/ui/datasets/{dataset_id}"]
        pages += ["/ui/datasets?sort=spent&order=desc", f"/ui/datasets/{dataset_id}/ledger.csv"]
        pages += [f"/ui/jobs/{j}" for j in job_ids] + [f"/ui/jobs/{j}/status" for j in job_ids]
        for path in pages:
            response = ui.get(path)
            assert response.status_code == 200, (path, response.status_code)
            bodies.append((f"GET {path}", response.text))
    finally:
        ui.close()
    return bodies


def _run_all(served: Served, vllm_url: str, state: EchoState) -> tuple[str, dict[str, str]]:
    """Upload the canary records, then one failing job per style; returns the dataset id and
    each job's expected error pattern by id."""
    # Counts declared public: every record reaches a teacher prompt at this size (a released
    # count may put the sampling rate anywhere), so each failure can quote one.
    body = {"task": TOY_TASK, "records": _rows(), "counts_public": True}
    upload = served.post("/v1/datasets", json=body)
    assert upload.status_code == 201, upload.text
    dataset_id = upload.json()["id"]
    budget = served.client.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 500.0})
    assert budget.status_code == 200, budget.text
    expected: dict[str, str] = {}
    no_wait = RetryPolicy(retries=2, base_delay_s=0.0, sleep=lambda _s: None)
    for case in _cases(vllm_url, state):
        leaks = case.leaks()
        body = {
            "dataset_id": dataset_id,
            "method": "tang",
            "epsilon": 1.0,
            "shots": 2,
            "params": FAST_PARAMS,
        }
        submitted = served.post("/v1/jobs", json=body)
        assert submitted.status_code == 201, (case.name, submitted.text)
        job_id = submitted.json()["id"]
        run_job(
            job_id,
            database_url=served.url,
            provider=case.provider,
            retry=no_wait,
            progress_interval_s=0.0,
        )
        if case.leaks() <= leaks:
            with session_scope(served.url) as session:
                job = session.get(Job, job_id)
                seen = (job.status, job.error) if job is not None else None
            pytest.fail(f"{case.name}: the backend never quoted the prompt; the job: {seen}")
        expected[job_id] = case.expected
    return dataset_id, expected


@pytest.fixture
def verbose_logs() -> Iterator[None]:
    """Every level of the app's and the workers' loggers reaches the captured output."""
    loggers = [logging.getLogger(name) for name in ("app", "workers")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def _check(
    served: Served, vllm_url: str, state: EchoState, capfd: pytest.CaptureFixture[str]
) -> None:
    dataset_id, expected = _run_all(served, vllm_url, state)
    with session_scope(served.url) as session:
        jobs = session.scalars(select(Job).where(Job.id.in_(list(expected))))
        stored = {j.id: (j.status, j.error) for j in jobs}
    views = _views(served, dataset_id, list(expected))
    captured = capfd.readouterr()
    logged = served.logs.getvalue()
    assert "job " in logged and "failed" in logged  # the worker's failures were logged
    surfaces = [
        ("log records", logged),
        ("stdout", captured.out),
        ("stderr", captured.err),
        *(("stored error", error or "") for _status, error in stored.values()),
        *(("response", body) for body in served.bodies),
        *views,
    ]
    for where, content in surfaces:
        assert CANARY not in content, f"canary in {where}: {content[:3000]}"
        assert not CANARY_IDS.search(content), f"canary's token ids in {where}"
    for job_id, pattern in expected.items():
        status, error = stored[job_id]
        assert status == "failed" and error is not None, (job_id, status, error)
        assert re.fullmatch(pattern, error), (pattern, error)


def test_no_record_text_in_job_errors_sqlite(
    sqlite_url: str,
    echoing_server: tuple[str, EchoState],
    verbose_logs: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    url, state = echoing_server
    served = Served(sqlite_url)
    try:
        _check(served, url, state, capfd)
    finally:
        served.close()


def test_no_record_text_in_job_errors_postgres(
    postgres_url: str,
    echoing_server: tuple[str, EchoState],
    verbose_logs: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    url, state = echoing_server
    served = Served(postgres_url)
    try:
        _check(served, url, state, capfd)
    finally:
        served.close()
