"""Errors of the right kind (issue 10, item 4) and limits (item 5), on SQLite.

Each test names the status and code a client must get, and checks that nothing already stored
was lost. PostgreSQL-specific cases are in ``test_errors_postgres.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import sessionmaker

from app.db.models import DatasetRecord
from app.db.session import session_scope
from tests.api.conftest import MARKER, TOY_TASK, Api, auth, csv_bytes, error_of, make_api, toy_rows

LIST_ROUTES = ("/v1/datasets", "/v1/jobs", "/v1/prompts")
HUGE = 2**63  # one past the largest 64-bit signed integer


def _records(url: str) -> int:
    with session_scope(url) as session:
        return session.scalar(select(func.count()).select_from(DatasetRecord)) or 0


@pytest.mark.parametrize("route", LIST_ROUTES)
@pytest.mark.parametrize("param", ["offset", "limit"])
def test_paging_beyond_64_bits_is_a_422(api: Api, route: str, param: str) -> None:
    response = api.client.get(route, params={param: HUGE}, headers=auth(api.admin))
    assert response.status_code == 422, response.text
    assert param in error_of(response)["message"]
    largest = api.client.get(route, params={"offset": HUGE - 1}, headers=auth(api.admin))
    assert largest.status_code == 200 and largest.json() == []


def test_deeply_nested_json_is_a_400(api: Api) -> None:
    api.upload()
    depth = 100_000
    body = b'{"records": ' + b"[" * depth + b"]" * depth + b"}"
    for route in ("/v1/datasets", "/v1/jobs", "/v1/keys"):
        response = api.client.post(
            route, content=body, headers={**auth(api.admin), "Content-Type": "application/json"}
        )
        assert response.status_code == 400, (route, response.text[:200])
        assert "JSON" in error_of(response)["message"]
    jsonl = b'{"text": ' + b"[" * depth + b"]" * depth + b', "label": "w5"}\n'
    response = api.client.post(
        "/v1/datasets",
        files={"file": ("deep.jsonl", jsonl)},
        data={"task": "trec"},
        headers=auth(api.admin),
    )
    assert response.status_code == 422, response.text[:200]
    assert "line 1" in error_of(response)["message"]
    assert _records(api.url) == 24


def test_unreachable_database_is_a_503(api: Api, tmp_path) -> None:
    gone_url = f"sqlite:///{tmp_path / 'missing' / 'dir' / 'dpsyn.db'}"
    gone = create_engine(gone_url)
    app = api.client.app
    app.state.sessions = app.state.read_sessions = sessionmaker(bind=gone)
    # /healthz checks on an engine of its own, built from the settings' URL
    app.state.settings = app.state.settings.model_copy(update={"database_url": gone_url})
    for method, route in (("GET", "/v1/datasets"), ("POST", "/v1/jobs"), ("GET", "/healthz")):
        response = api.client.request(method, route, headers=auth(api.admin), json={})
        assert response.status_code == 503, (route, response.text)
        error = error_of(response)
        assert error["code"] == "database_unavailable"
        assert "Retry-After" in response.headers
        assert "sqlite" not in error["message"].lower()  # no driver text


def test_bodies_are_limited_on_every_route(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, max_body_bytes=4096, max_upload_bytes=50_000):
        big = {"dataset_id": "x" * 10_000, "epsilon": 1.0}
        for route in ("/v1/jobs", "/v1/keys", "/v1/prompts/abc/complete"):
            response = api.client.post(route, json=big, headers=auth(api.admin))
            assert response.status_code == 413, (route, response.text[:200])
            assert error_of(response)["code"] == "too_large"
            assert "4096" in error_of(response)["message"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the stream is counted
            yield b'{"scope": "admin", "x": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}'

        streamed = api.client.post(
            "/v1/keys",
            content=chunks(),
            headers={**auth(api.admin), "Content-Type": "application/json"},
        )
        assert streamed.status_code == 413, streamed.text[:200]
        # The upload keeps its own, larger limit.
        assert api.upload(toy_rows(12))["record_count"] == 24
        huge_upload = {"task": TOY_TASK, "records": toy_rows(2000)}
        response = api.client.post("/v1/datasets", json=huge_upload, headers=auth(api.admin))
        assert response.status_code == 413 and "50000" in error_of(response)["message"]


def test_not_found_messages_do_not_echo_huge_ids(api: Api) -> None:
    huge = "a" * 60_000  # (the test client refuses URLs over 64 KiB)
    for method, route in (
        ("GET", f"/v1/jobs/{huge}"),
        ("GET", f"/v1/datasets/{huge}"),
        ("GET", f"/v1/datasets/{huge}/budget"),
        ("DELETE", f"/v1/keys/{huge}"),
        ("GET", f"/v1/prompts/{huge}"),
    ):
        response = api.client.request(method, route, headers=auth(api.admin))
        assert response.status_code == 404, route
        assert len(response.text) < 400, (route, len(response.text))
    submit = api.client.post(
        "/v1/jobs", json={"dataset_id": huge[:500], "epsilon": 1.0}, headers=auth(api.admin)
    )
    assert submit.status_code == 422 and len(submit.text) < 400  # IDs are short


def test_rate_limit_per_key_with_retry_after(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, rate_limit_per_minute=3):
        answers = [
            api.client.get("/v1/datasets", headers=auth(api.admin)).status_code for _ in range(4)
        ]
        assert answers == [200, 200, 200, 429]
        limited = api.client.get("/v1/datasets", headers=auth(api.admin))
        assert limited.status_code == 429
        assert error_of(limited)["code"] == "rate_limited"
        assert 1 <= int(limited.headers["Retry-After"]) <= 60
        # Per key: another tenant's key still gets through, and so do health checks.
        assert api.client.get("/v1/datasets", headers=auth(api.other)).status_code == 200
        assert api.client.get("/healthz").status_code == 200


def test_no_rate_limit_by_default(api: Api) -> None:
    answers = {api.client.get("/v1/jobs", headers=auth(api.admin)).status_code for _ in range(80)}
    assert answers == {200}


def test_one_record_is_capped_and_the_cap_is_stated(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, max_record_chars=1000):
        rows = toy_rows()
        rows[5]["text"] = MARKER + "x" * 2000
        response = api.client.post(
            "/v1/datasets", json={"task": TOY_TASK, "records": rows}, headers=auth(api.admin)
        )
        assert response.status_code == 413, response.text
        message = error_of(response)["message"]
        assert "record 6" in message and "1000" in message and "DPSYN_MAX_RECORD_CHARS" in message
        assert _records(api.url) == 0


def test_csv_fields_over_128_kb(sqlite_url: str) -> None:
    rows = toy_rows()
    rows[0]["text"] = MARKER + "y" * 200_000
    files = {"file": ("big.csv", csv_bytes(rows))}
    for api in make_api(sqlite_url, max_record_chars=300_000):
        response = api.client.post(
            "/v1/datasets", files=files, data={"task": dumps_task()}, headers=auth(api.admin)
        )
        assert response.status_code == 201, response.text
        assert response.json()["record_count"] == 24
    for api in make_api(sqlite_url):  # the default cap: a clear 413, not "invalid CSV"
        response = api.client.post(
            "/v1/datasets", files=files, data={"task": dumps_task()}, headers=auth(api.admin)
        )
        assert response.status_code == 413, response.text
        assert "record 1" in error_of(response)["message"]


def test_record_text_must_be_a_string(api: Api) -> None:
    rows = toy_rows()
    rows[2]["text"] = 12345
    response = api.client.post(
        "/v1/datasets", json={"task": TOY_TASK, "records": rows}, headers=auth(api.admin)
    )
    assert response.status_code == 422, response.text
    assert "records[2].text" in error_of(response)["message"]
    schema = api.client.get("/openapi.json").json()
    body = schema["paths"]["/v1/datasets"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["properties"]["records"]["items"]["properties"]["text"] == {
        "type": "string"
    }


def test_sqlite_files_are_private(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh' / 'dpsyn.db'}"
    (tmp_path / "fresh").mkdir()
    for api in make_api(url):
        api.upload()
    files = sorted((tmp_path / "fresh").iterdir())
    assert files, "no database file"
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o600, (path.name, oct(path.stat().st_mode))
    sqlite3.connect(files[0]).close()


def dumps_task() -> str:
    import json

    return json.dumps(TOY_TASK)


def test_numbers_are_not_booleans_or_strings(api: Api) -> None:
    dataset = api.upload()
    for body in ({"epsilon": True}, {"epsilon": "2"}, {"epsilon": 1.0, "delta": False}):
        response = api.budget(dataset["id"], **{"epsilon": 1.0} | body)
        assert response.status_code == 422, (body, response.text)
    assert api.budget(dataset["id"], 2).status_code == 200  # an integer is a number
    for extra in ({"shots": True}, {"params": {"M": True}}, {"params": {"M": "2"}}):
        response = api.submit(dataset["id"], **extra)
        assert response.status_code == 422, (extra, response.text)
    assert api.submit(dataset["id"], 1).status_code == 201
