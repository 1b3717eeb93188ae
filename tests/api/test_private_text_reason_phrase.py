"""No private text through the HTTP client's logs (issue 31, item 2).

httpx logs every response at INFO with its status line, reason phrase included, and a model
server or a proxy may put its input there (``HTTP/1.1 400 Question: <record> ...``). The
server here is the toy vLLM of the HTTP client's tests, answering any request that holds a
record's canary with such a status line (400, or 503, which is retried). Each test runs a
real process the service starts, with its own logging set up as in production, and searches
everything it wrote (stdout and stderr): ``dpsyn serve`` with its in-process worker (failing
jobs, a job that succeeds, ``/complete`` queries with the canary), ``dpsyn serve`` with a
Celery broker and a ``dpsyn worker`` running the jobs, and ``dpsyn synthesize --backend
vllm`` run by a wrapper that turned the root logger to DEBUG.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import FAST_PARAMS, TOY_TASK
from tests.api.test_private_text import CANARY, _rows
from tests.llm.test_vllm_http import MODEL, FakeState, FakeVLLMHandler, _FakeHTTPServer, toy_text
from tests.workers.processes import ROOT, OwnRedis, Worker, free_port, wait_for

KEY = "reason-phrase-test-admin-key-0123456789abcdef"
QUERY = f"what is {CANARY} here"


@dataclass
class ReasonState(FakeState):
    status: int = 400  # what a request with the canary gets
    answered: int = 0  # status lines that carried the canary


class ReasonPhraseHandler(FakeVLLMHandler):
    """The toy vLLM server, answering a request that holds the canary with a status line whose
    reason phrase quotes it: ``HTTP/1.1 400 Question: CANARY... secret w5 3 what``."""

    protocol_version = "HTTP/1.1"

    def _tokenize(self, body: dict[str, Any]) -> None:
        if not self._refused(str(body.get("prompt", ""))):
            super()._tokenize(body)

    def _completions(self, body: dict[str, Any]) -> None:
        rows = ["".join(toy_text(t) for t in row) for row in body["prompt"]]
        if not self._refused(" ".join(rows)):
            super()._completions(body)

    def _refused(self, text: str) -> bool:
        state = self.state
        if not isinstance(state, ReasonState) or CANARY not in text:
            return False
        at = text.index(CANARY)
        quoted = " ".join(text[max(0, at - 20) : at + len(CANARY) + 20].split())
        with state.lock:
            state.answered += 1
        self.send_response(state.status, f"Question: {quoted}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
        return True


@pytest.fixture
def reason_server() -> Iterator[tuple[str, ReasonState]]:
    httpd = _FakeHTTPServer(("127.0.0.1", 0), ReasonPhraseHandler)
    httpd.state = state = ReasonState()
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _env(vllm_url: str, tmp_path: Path, **settings: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")},
        "PYTHONPATH": str(ROOT),
        "DPSYN_BACKEND": "vllm",
        "DPSYN_VLLM_URL": vllm_url,
        "DPSYN_MODEL": MODEL,
        "DPSYN_BOOTSTRAP_API_KEY": KEY,
        "DPSYN_DATABASE_URL": f"sqlite:///{tmp_path / 'dpsyn.db'}",
        # One key folder for the server and the worker (each inherits other variables).
        "DPSYN_RECORD_KEYS_DIR": str(tmp_path / "record_keys"),
        **settings,
    }


class Serve:
    """``dpsyn serve`` as its own process, everything it writes going to ``log``."""

    def __init__(self, env: dict[str, str], tmp_path: Path) -> None:
        self.log = tmp_path / "serve.log"
        port = free_port()
        command = [
            sys.executable, "-c", "from app.cli import main; main()", "serve",
            "--data-dir", str(tmp_path / "state"), "--port", str(port),
        ]  # fmt: skip
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=60,
        )
        wait_for(self._healthy, 90, "dpsyn serve to start", self.log)

    def _healthy(self) -> bool:
        assert self.process.poll() is None, self.text()
        try:
            return self.api.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def text(self) -> str:
        return self.log.read_text()

    def dataset(self, rows: list[dict[str, Any]]) -> str:
        # Counts declared public: every record then reaches a teacher prompt at this size
        # (a released count may put the sampling rate anywhere, and the server fails only
        # on a prompt that holds a record).
        body = {"task": TOY_TASK, "records": rows, "counts_public": True}
        created = self.api.post("/v1/datasets", json=body)
        assert created.status_code == 201, created.text
        dataset_id = str(created.json()["id"])
        budget = self.api.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 500.0})
        assert budget.status_code == 200, budget.text
        return dataset_id

    def job(self, dataset_id: str) -> dict[str, Any]:
        """Submit a small job and wait for its end."""
        body = {"dataset_id": dataset_id, "method": "tang", "epsilon": 1.0, "shots": 2}
        submitted = self.api.post("/v1/jobs", json={**body, "params": FAST_PARAMS})
        assert submitted.status_code == 201, submitted.text
        path = f"/v1/jobs/{submitted.json()['id']}"
        ended: list[dict[str, Any]] = []

        def finished() -> bool:
            job = self.api.get(path).json()
            ended[:] = [job] if job["status"] in ("succeeded", "failed", "cancelled") else []
            return bool(ended)

        wait_for(finished, 120, f"job {path}", self.log)
        return ended[0]

    def close(self) -> str:
        """Stop the server; everything it wrote."""
        self.api.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.text()


def _failing_jobs(serve: Serve, state: ReasonState) -> None:
    """A job the server refuses (400), then one it keeps answering 503 (retried)."""
    dataset_id = serve.dataset(_rows())
    for status, code, calls in ((400, "backend_rejected", 1), (503, "backend_unavailable", 4)):
        state.status, before = status, state.answered
        job = serve.job(dataset_id)
        assert job["status"] == "failed" and job["error"].startswith(code), job
        assert state.answered - before >= calls, (status, state.answered - before)


def _assert_clean(where: str, logged: str) -> None:
    if CANARY in logged:
        at = logged.index(CANARY)
        pytest.fail(f"canary in {where}: ...{logged[max(0, at - 300) : at + 300]}...")


def test_dpsyn_serve_logs_no_reason_phrase(
    reason_server: tuple[str, ReasonState], tmp_path: Path
) -> None:
    url, state = reason_server
    serve = Serve(_env(url, tmp_path), tmp_path)
    try:
        _failing_jobs(serve, state)
        clean = [{**row, "text": f"plain {row['label']} {i} what"} for i, row in enumerate(_rows())]
        done = serve.job(serve.dataset(clean))
        assert done["status"] == "succeeded" and done["prompt_id"], done
        for status in (400, 503):
            state.status, before = status, state.answered
            answer = serve.api.post(
                f"/v1/prompts/{done['prompt_id']}/complete", json={"query": QUERY}
            )
            assert answer.status_code >= 400 and CANARY not in answer.text, answer.text
            assert state.answered > before, status
    finally:
        logged = serve.close()
    assert "Application startup complete" in logged  # uvicorn's INFO lines were written
    assert '"POST /v1/jobs HTTP/1.1" 201' in logged  # and its access log
    _assert_clean("dpsyn serve's output", logged)


def test_a_celery_worker_logs_no_reason_phrase(
    reason_server: tuple[str, ReasonState], tmp_path: Path
) -> None:
    url, state = reason_server
    redis = OwnRedis()  # its own: no other worker takes these jobs from the default queue
    env = _env(url, tmp_path, DPSYN_BROKER_URL=redis.url)
    serve: Serve | None = None
    worker: Worker | None = None
    try:
        serve = Serve(env, tmp_path)  # first: it migrates the database the worker uses
        settings = {k: v for k, v in env.items() if k.startswith("DPSYN_")}
        worker = Worker(tmp_path / "worker.log", "dpsyn", settings)
        _failing_jobs(serve, state)
    finally:
        logged = serve.close() if serve is not None else ""
        if worker is not None:
            worker.close()
        redis.close()
    assert worker is not None
    worked = worker.text()
    assert "ready." in worked and "job " in worked  # Celery's and the runner's INFO lines
    _assert_clean("the Celery worker's output", worked)
    _assert_clean("dpsyn serve's output", logged)


def test_dpsyn_synthesize_on_vllm_logs_no_reason_phrase(
    reason_server: tuple[str, ReasonState], tmp_path: Path
) -> None:
    """A wrapper that turned on logging at DEBUG before running the command (the operator's
    choice) still gets no status line of the model server."""
    url, state = reason_server
    data = tmp_path / "records.csv"
    data.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in _rows()))
    wrapper = "import logging; logging.basicConfig(level=logging.DEBUG); "
    command = [
        sys.executable, "-c", wrapper + "from app.cli import main; main()", "synthesize",
        "--data", str(data), "--task", "custom", "--labels", "w5,w7", "--text-col", "text",
        "--label-col", "label", "--backend", "vllm", "--url", url, "--model", MODEL,
        "--method", "tang", "--epsilon", "1", "--shots", "2", "--M", "2", "--N", "1",
        "--tmax", "4", "--K", "8", "--public-counts",  # every record sampled, as above
    ]  # fmt: skip
    env = _env(url, tmp_path)
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode != 0 and state.answered >= 1, (done.returncode, done.stderr[-2000:])
    assert "HTTP 400" in done.stderr, done.stderr[-2000:]  # the command's own one-line error
    _assert_clean("dpsyn synthesize's output", done.stdout + done.stderr)
