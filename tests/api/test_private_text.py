"""No private text in a log line or a response, whatever fails (issue 10, item 1).

A canary is planted in every record; the tests then provoke each error path an upload can
take (inputs the store refuses, bad files, a failing insert in the data layer that raises an
unexpected exception through uvicorn's own error logging) against a real uvicorn server, and
grep everything logged, everything written to stdout/stderr and every response body.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import create_engine, func, select, text

from app.db.models import DatasetRecord
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.api.conftest import BOOTSTRAP_KEY, TOY_TASK, RecordingQueue
from tests.synthesis.fake_backend import FakeBackend

CANARY = "CANARY7f3a9"
WATCHED = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "app", "sqlalchemy")


_CALLS = itertools.count()


def _rows(n: int = 12) -> list[dict[str, Any]]:
    """Records of their own on each call (the call's number joins a word, so the word counts
    stay): the PostgreSQL database is the test process's, and records a tenant uploaded
    before are refused (409) before they reach the insert that some of these tests make fail."""
    call = next(_CALLS)
    return [
        {"text": f"{CANARY} secret {label} {i}-{call} what", "label": label}
        for label in ("w5", "w7")
        for i in range(n)
    ]


class Served:
    """A real uvicorn server in a thread, and everything its loggers emitted."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.logs = io.StringIO()
        self.bodies: list[str] = []
        app = create_app(
            Settings(database_url=url, bootstrap_api_key=BOOTSTRAP_KEY, max_record_chars=500),
            queue=RecordingQueue(url),
            backend_provider=StaticProvider(FakeBackend(stop_after=None)),
        )
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(app, log_level="debug", lifespan="on")  # uvicorn's logging
        self.server = uvicorn.Server(config)
        handler = logging.StreamHandler(self.logs)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.handler = handler
        for name in WATCHED:
            logging.getLogger(name).addHandler(handler)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.02)
        host, port = self.sock.getsockname()
        self.client = httpx.Client(
            base_url=f"http://{host}:{port}",
            headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"},
            timeout=30,
        )

    def wait_logged(self, line: str, timeout_s: float = 20.0) -> str:
        """Everything logged so far, once ``line`` is in it (or the timeout has passed).

        uvicorn logs an exception that escapes the app after the 500 has been sent, so the
        client can read the response before the server thread has written that line."""
        deadline = time.monotonic() + timeout_s
        while line not in self.logs.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.logs.getvalue()

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        if "json" in kwargs:  # ASCII JSON: lone surrogates as escapes
            kwargs["content"] = json.dumps(kwargs.pop("json")).encode()
            kwargs["headers"] = {"Content-Type": "application/json"}
        response = self.client.post(path, **kwargs)
        self.bodies.append(response.text)
        return response

    def ui(self) -> httpx.Client:
        """A client signed in to the dashboard (the bootstrap key's tenant)."""
        client = httpx.Client(base_url=str(self.client.base_url), timeout=30)
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/login").text)
        assert token, "no sign-in form"
        form = {"csrf": token.group(1), "api_key": BOOTSTRAP_KEY}
        assert client.post("/ui/login", data=form).status_code == 303
        return client

    def ui_uploads(self, files: Iterable[tuple[str, bytes]]) -> list[int]:
        """Upload each file through the dashboard's form; returns the statuses."""
        statuses = []
        ui = self.ui()
        try:
            token = re.search(r'name="csrf" value="([^"]+)"', ui.get("/ui/datasets").text)
            assert token, "no upload form"
            for name, content in files:
                form = {"csrf": token.group(1), "task": "custom", "task_spec": json.dumps(TOY_TASK)}
                response = ui.post(
                    "/ui/datasets/upload", data=form, files={"file": (name, content)}
                )
                self.bodies.append(response.text)
                statuses.append(response.status_code)
        finally:
            ui.close()
        return statuses

    def close(self) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()
        for name in WATCHED:
            logging.getLogger(name).removeHandler(self.handler)


@pytest.fixture
def served_sqlite(sqlite_url: str) -> Iterator[Served]:
    served = Served(sqlite_url)
    yield served
    served.close()


# Files whose every line is a record (issue 21, parts 2 and 6a): a CSV/TSV without a header
# row (its first row is read as the header), JSON lines with private keys, and JSON lines
# whose text or label is an object (refused as the JSON route refuses it, not stored).
UNSAFE_FILES = (
    ("headerless.csv", f"{CANARY} secret,Location\n{CANARY} more,w5\n".encode()),
    ("headerless.tsv", f"{CANARY} secret\tw5\n".encode()),
    ("keys.jsonl", f'{{"{CANARY}": "x", "label": "w5"}}\n'.encode()),
    ("object.jsonl", f'{{"text": {{"nested": "{CANARY}"}}, "label": "w5"}}\n'.encode()),
    ("label.jsonl", f'{{"text": "fine", "label": ["{CANARY}"]}}\n'.encode()),
)


def _records(url: str) -> int:
    with session_scope(url) as session:
        return session.scalar(select(func.count()).select_from(DatasetRecord)) or 0


def _provoke(served: Served, failing_insert: str) -> list[int]:
    """Every error path of an upload; returns the statuses (all 4xx but the planted 500)."""
    statuses = []

    def upload(rows: list[dict[str, Any]], **extra: Any) -> None:
        response = served.post("/v1/datasets", json={"task": TOY_TASK, "records": rows, **extra})
        statuses.append(response.status_code)

    for bad in ("\x00", "\ud800", "\udfff"):
        rows = _rows()
        rows[3]["text"] += bad
        upload(rows)
        rows = _rows()
        rows[4]["label"] = "w5" + bad
        upload(rows)
    upload(_rows(), name=f"{CANARY}\x00")
    upload([*_rows(), {"text": {"nested": CANARY}, "label": "w5"}])
    upload([*_rows(), {"text": CANARY, "label": f"unknown {CANARY}"}])
    upload([*_rows(), {"text": CANARY + "x" * 600, "label": "w5"}])
    upload([*_rows(), {"txt": CANARY, "label": "w5"}])
    upload([*_rows(), {CANARY: "a key", "label": "w5"}])  # a line's keys may be private
    upload([*_rows(), {"text": "fine", "label": {"nested": CANARY}}])
    upload(_rows(), text_column="missing")
    bad_csv = f'text,label\n"{CANARY} unterminated,w5\n"{CANARY}\x00",w7\n'.encode()
    for name, content in (
        ("bad.csv", bad_csv),
        ("bad.jsonl", f'{{"text": "{CANARY}\\u0000", "label": "w5"}}\n'.encode()),
        ("bad.jsonl", f'{{"text": "{CANARY}", "label": "w5"'.encode()),
        ("bad.tsv", f"text\tlabel\n{CANARY}\tnope\n".encode()),
        *UNSAFE_FILES,
    ):
        response = served.post(
            "/v1/datasets",
            files={"file": (name, content)},
            data={"task": json.dumps(TOY_TASK)},
        )
        statuses.append(response.status_code)
    statuses += served.ui_uploads(UNSAFE_FILES)
    deep = b'{"records": [{"text": "' + CANARY.encode() + b'"}, ' + b"[" * 50_000 + b"]}"
    statuses.append(
        served.post(
            "/v1/datasets", content=deep, headers={"Content-Type": "application/json"}
        ).status_code
    )
    # The data layer itself fails with the records in its exception (statement parameters).
    engine = create_engine(served.url)
    with engine.begin() as conn:
        conn.execute(text(failing_insert))
    engine.dispose()
    upload(_rows())
    return statuses


def _assert_no_canary(served: Served, capfd: pytest.CaptureFixture[str]) -> str:
    logged = served.wait_logged("Exception in ASGI application")
    captured = capfd.readouterr()  # after the server's last line
    assert "Exception in ASGI application" in logged  # uvicorn's own error log was exercised
    assert "IntegrityError" in logged  # the type (and location) is logged, not the message
    for where, content in (
        ("log records", logged),
        ("stdout", captured.out),
        ("stderr", captured.err),
        *(("response", body) for body in served.bodies),
    ):
        assert CANARY not in content, f"canary in {where}: {content[:2000]}"
    return logged


def test_no_record_text_in_logs_or_responses_sqlite(
    served_sqlite: Served, capfd: pytest.CaptureFixture[str]
) -> None:
    trigger = (
        "CREATE TRIGGER refuse_records BEFORE INSERT ON dataset_records "
        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    )
    statuses = _provoke(served_sqlite, trigger)
    assert statuses[-1] == 500
    assert all(400 <= status < 500 for status in statuses[:-1]), statuses
    assert _records(served_sqlite.url) == 0
    _assert_no_canary(served_sqlite, capfd)


def test_no_record_text_in_logs_or_responses_postgres(
    postgres_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    served = Served(postgres_url)
    try:
        trigger = (
            # Every record insert fails (the database sees sealed records only, so it cannot
            # pick the canary's): the error's parameters must not reach a log or a response.
            "CREATE OR REPLACE FUNCTION refuse_canary() RETURNS trigger AS $$ BEGIN "
            "RAISE unique_violation USING MESSAGE = 'refused by the test'; "
            "RETURN NEW; END $$ LANGUAGE plpgsql; "
            "CREATE TRIGGER refuse_canary BEFORE INSERT ON dataset_records "
            "FOR EACH ROW EXECUTE FUNCTION refuse_canary()"
        )
        before = _records(postgres_url)  # the session's database: other tests' records too
        statuses = _provoke(served, trigger)
        assert statuses[-1] == 500
        assert all(400 <= status < 500 for status in statuses[:-1]), statuses
        assert _records(postgres_url) == before
        _assert_no_canary(served, capfd)
    finally:
        served.close()
        engine = create_engine(postgres_url)
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS refuse_canary ON dataset_records"))
        engine.dispose()


def test_log_records_keep_type_and_location_only() -> None:
    """The redaction applies to every logger, whatever its handlers (a worker's too)."""
    from app.log_redaction import install_log_redaction

    install_log_redaction()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("some.library.nobody.configured")
    logger.addHandler(handler)
    try:
        try:
            try:
                raise KeyError(f"inner {CANARY}")
            except KeyError as inner:
                raise ValueError(f"outer {CANARY}") from inner
        except ValueError:
            logger.exception("failed with %s", "an argument")
            logger.error("failed again", exc_info=True)
        logger.warning("an exception as an argument: %s", RuntimeError(CANARY))
        logger.error(LookupError(CANARY))  # an exception as the message itself
    finally:
        logger.removeHandler(handler)
    logged = stream.getvalue()
    assert CANARY not in logged
    assert "failed with an argument" in logged and "failed again" in logged
    assert "ValueError" in logged and "KeyError" in logged and "RuntimeError" in logged
    assert "LookupError (message withheld)" in logged
    assert "test_private_text.py" in logged  # where it was raised
