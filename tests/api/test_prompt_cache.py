"""The prompt-read hot path's caches (issue 23): prompt bodies per (tenant, ID) with a strong
ETag and 304, and key lookups whose staleness after revocation is bounded.

Each test would fail if its cache broke the contract: a body served to the wrong tenant, a
304 for a stale tag, a revoked key that still opens the API from this process, or a key
revoked elsewhere that opens it past ``KEY_TTL_S``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from sqlalchemy import update

from app.api import deps
from app.api.deps import key_lookups
from app.api.routes.prompts import prompt_cache
from app.db.models import ApiKey, KeyScope
from app.db.session import session_scope
from app.services import key_cache
from app.services import prompts as prompt_service
from app.services.key_cache import CachedKey, KeyCache, LruCache
from app.services.tenants import (
    authenticate,
    find_tenant,
    hash_key,
    revoke_key_by_id,
    set_disabled,
)
from tests.api.conftest import Api, auth, error_of, make_api
from tests.api.test_soft_prompts import run_with_soft_prompt, soft_prompt


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


@pytest.fixture
def prompt_id(api: Api) -> str:
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    api.run_job(job["id"])
    return api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]


def _get(api: Api, path: str, key: str, **headers: str):
    return api.client.get(path, headers={**auth(key), **headers})


def test_the_body_is_cached_with_a_strong_etag_and_revalidates_with_304(
    api: Api, prompt_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"/v1/prompts/{prompt_id}"
    first = _get(api, path, api.reader)
    assert first.status_code == 200 and first.json()["id"] == prompt_id
    etag = first.headers["etag"]
    assert etag == f'"{hashlib.sha256(first.content).hexdigest()}"'  # strong: no W/
    # Served from the cache: the database read is not called again.
    monkeypatch.setattr(prompt_service, "get_prompt_set", _must_not_be_called)
    again = _get(api, path, api.admin)  # same tenant, another key: same cached body
    assert again.content == first.content and again.headers["etag"] == etag
    for header in (etag, f"W/{etag}", f'"nope", {etag}', "*"):
        not_modified = _get(api, path, api.reader, **{"If-None-Match": header})
        assert not_modified.status_code == 304 and not_modified.content == b""
        assert not_modified.headers["etag"] == etag
    stale = _get(api, path, api.reader, **{"If-None-Match": '"an-old-tag"'})
    assert stale.status_code == 200 and stale.content == first.content


def _must_not_be_called(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("the prompt was read from the database again")


def test_another_tenant_gets_404_even_when_the_body_is_cached(api: Api, prompt_id: str) -> None:
    path = f"/v1/prompts/{prompt_id}"
    assert _get(api, path, api.reader).status_code == 200
    assert len(prompt_cache(api.client.app)) == 1  # tenant A's body is cached
    for headers in ({}, {"If-None-Match": "*"}):
        other = _get(api, path, api.other, **headers)
        assert other.status_code == 404 and error_of(other)["code"] == "not_found"
    assert _get(api, path, api.reader).status_code == 200


def test_the_soft_prompt_download_answers_304(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    job_id = api.submit(dataset["id"]).json()["id"]
    soft = soft_prompt()
    run_with_soft_prompt(api, job_id, soft)
    prompt = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()["prompt_id"]
    path = f"/v1/prompts/{prompt}/soft-prompt"
    first = _get(api, path, api.reader)
    assert first.status_code == 200 and first.headers["etag"] == f'"{soft.sha256}"'
    not_modified = _get(api, path, api.reader, **{"If-None-Match": first.headers["etag"]})
    assert not_modified.status_code == 304 and not_modified.content == b""
    assert _get(api, path, api.other, **{"If-None-Match": "*"}).status_code == 404


def test_a_key_revoked_through_the_api_is_refused_at_once(api: Api, prompt_id: str) -> None:
    created = api.client.post("/v1/keys", json={"scope": "prompts:read"}, headers=auth(api.admin))
    key = created.json()
    path = f"/v1/prompts/{prompt_id}"
    assert _get(api, path, key["key"]).status_code == 200  # now cached
    assert api.client.delete(f"/v1/keys/{key['id']}", headers=auth(api.admin)).status_code == 200
    assert _get(api, path, key["key"]).status_code == 401


def test_a_tenant_disabled_in_this_process_is_refused_at_once(api: Api, prompt_id: str) -> None:
    path = f"/v1/prompts/{prompt_id}"
    assert _get(api, path, api.reader).status_code == 200
    with session_scope(api.url) as session:
        key = authenticate(session, api.reader)
        assert key is not None
        set_disabled(session, find_tenant(session, key.tenant_id), True)
    assert _get(api, path, api.reader).status_code == 401
    assert _get(api, path, api.admin).status_code == 401


def test_a_key_revoked_by_id_in_this_process_is_refused_at_once(api: Api, prompt_id: str) -> None:
    """As ``dpsyn admin keys revoke`` run in the API's process does."""
    path = f"/v1/prompts/{prompt_id}"
    assert _get(api, path, api.reader).status_code == 200
    with session_scope(api.url) as session:
        key = authenticate(session, api.reader)
        assert key is not None
        revoke_key_by_id(session, key.id)
    assert _get(api, path, api.reader).status_code == 401
    assert _get(api, path, api.admin).status_code == 200  # the tenant's other key still works


def test_a_key_revoked_by_another_process_is_refused_within_the_ttl(
    api: Api, prompt_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"/v1/prompts/{prompt_id}"
    assert _get(api, path, api.reader).status_code == 200
    with session_scope(api.url) as session:  # as another process would: no invalidation
        session.execute(update(ApiKey).where(ApiKey.scope == "prompts:read").values(revoked=True))
    assert _get(api, path, api.reader).status_code == 200  # the documented staleness
    later = key_cache.clock() + key_cache.KEY_TTL_S
    monkeypatch.setattr(key_cache, "clock", lambda: later)
    assert _get(api, path, api.reader).status_code == 401
    assert len(key_lookups(api.client.app)) >= 1  # the admin key's entry is still there


def test_failed_lookups_are_not_cached(api: Api) -> None:
    cache = key_lookups(api.client.app)  # may hold the keys loaded at start
    assert _get(api, "/v1/prompts", "dpsyn_wrong").status_code == 401
    assert hash_key("dpsyn_wrong") not in cache.hashes()
    assert cache.get(hash_key("dpsyn_wrong")) is None


def test_a_lookup_that_raced_a_revocation_is_not_stored() -> None:
    cache = KeyCache()
    before = key_cache.generation()
    key_cache.forget_key("some-other-key")  # any revocation in between
    cache.put("hash", CachedKey("tenant", "key", KeyScope.ADMIN), before)
    assert cache.get("hash") is None
    cache.put("hash", CachedKey("tenant", "key", KeyScope.ADMIN), key_cache.generation())
    assert cache.get("hash") is not None
    key_cache.forget_tenant("tenant")
    assert cache.get("hash") is None


def test_the_lru_is_bounded_and_evicts_the_least_recently_used() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3)
    assert len(cache) == 2 and cache.get("b") is None and cache.get("a") == 1


def test_a_key_past_half_its_life_is_renewed_in_the_background(
    api: Api, prompt_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served while renewed, so no request waits for the database; a renewal that finds the
    key revoked elsewhere drops it before the TTL would have."""
    path = f"/v1/prompts/{prompt_id}"
    assert _get(api, path, api.reader).status_code == 200
    with session_scope(api.url) as session:  # revoked by another process: no invalidation
        session.execute(update(ApiKey).where(ApiKey.scope == "prompts:read").values(revoked=True))
    later = key_cache.clock() + 0.6 * key_cache.KEY_TTL_S  # past half the life, not expired
    monkeypatch.setattr(key_cache, "clock", lambda: later)
    assert _get(api, path, api.reader).status_code == 200  # served from the cache meanwhile
    deadline = time.monotonic() + 10
    while _get(api, path, api.reader).status_code == 200:
        assert time.monotonic() < deadline, "the renewal never dropped the revoked key"
        time.sleep(0.05)
    assert _get(api, path, api.admin).status_code == 200


def test_concurrent_misses_of_one_key_share_one_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """When a busy key's entry expires under many requests, one goes to the database."""
    calls = []

    def slow_lookup(_sessions: object, raw_key: str) -> deps.Principal:
        calls.append(raw_key)
        time.sleep(0.2)
        return deps.Principal(tenant_id="t", key_id="k", scope=KeyScope.ADMIN)

    monkeypatch.setattr(deps, "_authenticate", slow_lookup)
    app = FastAPI()
    app.state.read_sessions = None
    request = SimpleNamespace(app=app)

    async def crowd() -> list[deps.Principal | None]:
        return await asyncio.gather(*(deps._lookup(request, "dpsyn_k") for _ in range(20)))

    principals = asyncio.run(crowd())
    assert len(calls) == 1 and all(p is not None and p.key_id == "k" for p in principals)
    assert asyncio.run(crowd()) and len(calls) == 1  # then remembered
