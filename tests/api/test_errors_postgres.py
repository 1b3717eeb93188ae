"""Errors of the right kind on PostgreSQL (issue 10, item 4): inputs the store refuses are
4xx before any insert, an unreachable server is a 503."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import sessionmaker

from app.db.models import Dataset, DatasetRecord
from app.db.session import session_scope
from tests.api.conftest import TOY_TASK, Api, auth, error_of, make_api, toy_rows


@pytest.fixture(scope="module")
def pg_api(postgres_url: str) -> Iterator[Api]:
    yield from make_api(postgres_url)


def _stored(url: str, tenant_id_key: str) -> tuple[int, int]:
    with session_scope(url) as session:
        datasets = session.scalar(select(func.count()).select_from(Dataset))
        records = session.scalar(select(func.count()).select_from(DatasetRecord))
        return datasets or 0, records or 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("text", "a\x00b"), ("label", "w5\x00"), ("text", "lone \ud800 surrogate")],
)
def test_records_the_store_refuses_are_a_422(pg_api: Api, field: str, value: str) -> None:
    before = _stored(pg_api.url, pg_api.admin)
    rows = toy_rows()
    rows[7][field] = value
    response = pg_api.client.post(
        "/v1/datasets",
        content=json.dumps(
            {"task": TOY_TASK, "records": rows}
        ).encode(),  # lone surrogates as escapes
        headers={**auth(pg_api.admin), "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    message = error_of(response)["message"]
    assert f"records[7].{field}" in message
    assert _stored(pg_api.url, pg_api.admin) == before


def test_nul_in_names_files_and_task_specs_is_a_422(pg_api: Api) -> None:
    before = _stored(pg_api.url, pg_api.admin)
    admin = auth(pg_api.admin)
    bodies = [
        {"task": TOY_TASK, "records": toy_rows(), "name": "a\x00b"},
        {"task": {**TOY_TASK, "instruction": "x\x00"}, "records": toy_rows()},
    ]
    for body in bodies:
        response = pg_api.client.post("/v1/datasets", json=body, headers=admin)
        assert response.status_code == 422, response.text
    jsonl = b'{"text": "a\\u0000b", "label": "w5"}\n{"text": "fine", "label": "w7"}\n'
    for files, data in (
        ({"file": ("d.jsonl", jsonl)}, {"task": "trec", "text_column": "text"}),
        (
            {"file": ("d\x00.csv", b"text,label\nfine,w5\n")},
            {"task": "trec", "label_column": "label"},
        ),
        ({"file": ("d.csv", b"text,label\nfine,w5\n")}, {"task": "trec", "name": "n\x00"}),
    ):
        response = pg_api.client.post("/v1/datasets", files=files, data=data, headers=admin)
        assert response.status_code == 422, response.text
    dataset = pg_api.upload()
    for body in (
        {"dataset_id": dataset["id"] + "\x00", "epsilon": 1.0},
        {"dataset_id": dataset["id"], "epsilon": 1.0, "public_dataset_id": "p\x00"},
    ):
        assert pg_api.client.post("/v1/jobs", json=body, headers=admin).status_code == 422
    assert _stored(pg_api.url, pg_api.admin)[0] == before[0] + 1


def test_nul_in_path_ids_is_a_404_and_in_filters_a_422(pg_api: Api) -> None:
    admin = auth(pg_api.admin)
    for method, path in (
        ("GET", "/v1/datasets/a%00b"),
        ("DELETE", "/v1/datasets/a%00b"),
        ("GET", "/v1/datasets/a%00b/budget"),
        ("GET", "/v1/jobs/a%00b"),
        ("POST", "/v1/jobs/a%00b/cancel"),
        ("GET", "/v1/prompts/a%00b"),
        ("DELETE", "/v1/keys/a%00b"),
    ):
        response = pg_api.client.request(method, path, headers=admin)
        assert response.status_code == 404, (path, response.text)
        assert error_of(response)["code"] == "not_found"
    for path in ("/v1/jobs?dataset_id=a%00b", "/v1/prompts?dataset_id=a%00b"):
        response = pg_api.client.get(path, headers=admin)
        assert response.status_code == 422, (path, response.text)
        assert "dataset_id" in error_of(response)["message"]


def test_paging_beyond_64_bits_is_a_422_on_postgres(pg_api: Api) -> None:
    for route in ("/v1/datasets", "/v1/jobs", "/v1/prompts"):
        response = pg_api.client.get(route, params={"offset": 2**63}, headers=auth(pg_api.admin))
        assert response.status_code == 422, (route, response.text)


def test_unreachable_postgres_is_a_503(pg_api: Api) -> None:
    app = pg_api.client.app
    sessions, read_sessions = app.state.sessions, app.state.read_sessions
    gone = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    app.state.sessions = app.state.read_sessions = sessionmaker(bind=gone)
    try:
        for method, route in (("GET", "/v1/jobs"), ("PUT", "/v1/datasets/x/budget")):
            response = pg_api.client.request(
                method, route, headers=auth(pg_api.admin), json={"epsilon": 1}
            )
            assert response.status_code == 503, response.text
            assert error_of(response)["code"] == "database_unavailable"
            assert response.headers["Retry-After"]
    finally:
        app.state.sessions, app.state.read_sessions = sessions, read_sessions
    assert pg_api.client.get("/v1/jobs", headers=auth(pg_api.admin)).status_code == 200
