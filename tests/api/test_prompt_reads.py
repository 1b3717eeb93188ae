"""Reads at scale (issue 44): the cached prompt read answered before routing, the keys
renewed together and loaded at start, prompt bodies loaded at start and bounded by bytes,
last uses written in batches.

Before these, a read mix over 3,000 prompts and 1,000 keys (bench/load.py --mix) reached 0.08
of a minimal route's throughput: each read missed a cache of 1,024 bodies, renewed its key on
its own and wrote the key's last use on its own. Each test here fails if its part is undone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import event, update

from app.api import deps
from app.api.deps import get_principal, key_lookups
from app.api.routes.prompts import prompt_cache
from app.db.models import ApiKey, KeyScope
from app.db.session import session_scope
from app.services import prompts as prompt_service
from app.services.errors import UnauthorizedError
from app.services.key_cache import LruCache
from app.services.tenants import create_api_key, hash_key
from tests.api.conftest import Api, auth, error_of, make_api


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url, rate_limit_per_minute=8, rate_limit_burst=8)


def make_prompt(api: Api) -> str:
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    api.run_job(job["id"])
    return api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]


def _refuse() -> None:
    """The router's key check, replaced: a request that reaches it is answered 401 'routed'."""
    raise UnauthorizedError("routed")


def routed(response) -> bool:
    return response.status_code == 401 and error_of(response)["message"] == "routed"


def test_a_cached_read_is_answered_before_routing_exactly_as_the_route_answers(
    api: Api,
) -> None:
    prompt_id = make_prompt(api)
    path = f"/v1/prompts/{prompt_id}"
    answers = {
        q: api.client.get(path + q, headers=auth(api.reader)) for q in ("", "?format=messages")
    }
    tag = answers[""].headers["etag"]
    routed_304 = api.client.get(path, headers={**auth(api.reader), "If-None-Match": tag})
    # From here on the router's key check fails the test: only the fast path may answer.
    api.client.app.dependency_overrides[get_principal] = _refuse
    for query, first in answers.items():
        fast = api.client.get(path + query, headers=auth(api.reader))
        assert (fast.status_code, fast.content) == (first.status_code, first.content)
        assert {k: fast.headers[k] for k in ("etag", "content-type", "content-length")} == {
            k: first.headers[k] for k in ("etag", "content-type", "content-length")
        }
    fast_304 = api.client.get(path, headers={**auth(api.reader), "If-None-Match": tag})
    assert (fast_304.status_code, fast_304.headers["etag"]) == (304, routed_304.headers["etag"])
    # the key's rate is charged on the fast path as on the route (8 a minute, 6 used so far)
    for _ in range(2):
        assert api.client.get(path, headers=auth(api.reader)).status_code == 200
    limited = api.client.get(path, headers=auth(api.reader))
    assert limited.status_code == 429 and error_of(limited)["code"] == "rate_limited"


def test_what_the_caches_cannot_answer_goes_to_the_route(api: Api) -> None:
    prompt_id = make_prompt(api)
    path = f"/v1/prompts/{prompt_id}"
    assert api.client.get(path, headers=auth(api.reader)).status_code == 200  # cached now
    api.client.app.dependency_overrides[get_principal] = _refuse
    for headers, query in (
        (auth(api.other), ""),  # another tenant's key: its own (empty) cache entry
        (auth("not-a-key"), ""),  # an unknown key
        ({}, ""),  # no key
        (auth(api.reader), "?format=json"),  # a query the route refuses
    ):
        assert routed(api.client.get(path + query, headers=headers))
    del api.client.app.dependency_overrides[get_principal]
    assert api.client.get(path, headers=auth(api.other)).status_code == 404


def test_keys_are_loaded_at_start_and_renewed_together(sqlite_url: str) -> None:
    queries: list[str] = []

    def record(*args: object) -> None:
        queries.append(str(args[2]))

    for first in make_api(sqlite_url):
        reader, admin = first.reader, first.admin
    for api in make_api(sqlite_url):  # a new process: it loads the keys that exist
        app = api.client.app
        deadline = time.monotonic() + 5
        while len(key_lookups(app)) < 4:  # the bootstrap key and the first tenants' three
            assert time.monotonic() < deadline, "the keys were not loaded at start"
            time.sleep(0.02)
        engine = app.state.read_sessions.kw["bind"]
        event.listen(engine, "before_cursor_execute", record)
        try:
            for _ in range(3):  # known keys: no lookup of their own
                assert api.client.get("/v1/prompts", headers=auth(reader)).status_code == 200
        finally:
            event.remove(engine, "before_cursor_execute", record)
        assert not [q for q in queries if "api_keys" in q]
        # revoked by another process (no in-process invalidation): the next renewal drops it
        with session_scope(api.url) as session:
            session.execute(
                update(ApiKey).values(revoked=True).where(ApiKey.key_hash == hash_key(reader))
            )
        asyncio.run(asyncio.to_thread(deps._renew_keys, app, False))
        assert api.client.get("/v1/prompts", headers=auth(reader)).status_code == 401
        assert api.client.get("/v1/prompts", headers=auth(admin)).status_code == 200


def test_prompts_are_loaded_at_start(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for api in make_api(sqlite_url):
        made, reader = [make_prompt(api) for _ in range(2)], api.reader
    for api in make_api(sqlite_url):  # a new process on the same database
        cache = prompt_cache(api.client.app)
        deadline = time.monotonic() + 5
        while len(cache) < 2:
            assert time.monotonic() < deadline, "the prompts were not loaded at start"
            time.sleep(0.02)
        monkeypatch.setattr(prompt_service, "get_prompt_set", _no_read)
        for prompt_id in made:  # read by the first process's key: no database read
            response = api.client.get(f"/v1/prompts/{prompt_id}", headers=auth(reader))
            assert response.status_code == 200 and response.json()["id"] == prompt_id


def _no_read(*_args: object) -> None:
    raise AssertionError("the prompt was read from the database")


def test_the_body_cache_is_bounded_by_bytes() -> None:
    cache: LruCache[str, bytes] = LruCache(100, weigh=len, max_weight=10)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # a is now the most recently used
    cache.put("c", b"1234")  # 12 bytes: b, the least recently used, goes
    assert (cache.get("b"), cache.weight) == (None, 8)
    cache.put("a", b"123456")  # replaced: its old weight is given back
    assert cache.weight == 10 and cache.get("c") == b"1234"
    cache.discard("a")
    assert cache.weight == 4


def test_last_uses_due_together_are_written_by_one_statement(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a batch window long enough that five reads on a busy machine fall in one
    monkeypatch.setattr(deps, "LAST_USED_BATCH_S", 3.0)
    keys = [api.reader, api.admin]
    with session_scope(api.url) as session:
        tenant_id = session.get(ApiKey, key_lookups_id(api, api.reader)).tenant_id
        keys += [create_api_key(session, tenant_id, KeyScope.PROMPTS_READ)[1] for _ in range(3)]
    writes: list[str] = []
    engine = api.client.app.state.sessions.kw["bind"]

    def listener(*args: object) -> None:
        if str(args[2]).lstrip().upper().startswith("UPDATE API_KEYS"):
            writes.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", listener)
    try:
        for key in keys:
            assert api.client.get("/v1/prompts", headers=auth(key)).status_code == 200
        deadline = time.monotonic() + 10
        while getattr(api.client.app.state, "last_used_writes", set()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert len(writes) == 1, writes
    with session_scope(api.url) as session:
        rows = session.query(ApiKey).filter(ApiKey.key_hash.in_([hash_key(k) for k in keys]))
        assert all(row.last_used_at is not None for row in rows)


def key_lookups_id(api: Api, raw: str) -> str:
    with session_scope(api.url) as session:
        return session.query(ApiKey).filter_by(key_hash=hash_key(raw)).one().id
