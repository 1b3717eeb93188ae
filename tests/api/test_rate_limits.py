"""Rate limits that hold (issue 21, item 5).

Before: a bucket was made per *presented* bearer token, before the key was looked up, in a
table of at most 10,000; 10,001 random fake keys (each a 401 and a database lookup) evicted a
real key's bucket, which then got a fresh burst. ``/ui`` was not limited at all (its model
calls included) and sign-in took any number of wrong keys. Now buckets are keyed by key ID
after authentication, failed authentications have their own limit per client address (over
it: 429 before any lookup), the dashboard shares the key's limit (its model calls have a
stricter one) and sign-in failures are throttled per address.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import app.api.deps as deps
import app.api.routes.ui.session as ui_session
from app.api.limits import Limiter, MemoryBuckets, client_address
from app.db.models import KeyScope
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.main import create_app
from app.services.tenants import create_api_key, create_tenant
from app.settings import Settings
from tests.api.conftest import Api, RecordingQueue, auth, error_of, make_api
from tests.synthesis.fake_backend import FakeBackend

ATTACKER = ("203.0.113.7", 40000)  # TEST-NET-3: the flood's address
USER = ("198.51.100.20", 50000)  # TEST-NET-2: a real user elsewhere


def count_lookups(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """Every key lookup ``module`` makes (its ``authenticate``), recorded."""
    calls: list[str] = []
    real = module.authenticate

    def counted(session: Any, raw_key: str) -> Any:
        calls.append(raw_key)
        return real(session, raw_key)

    monkeypatch.setattr(module, "authenticate", counted)
    return calls


async def _get_all(
    app: FastAPI, client: tuple[str, int], requests: list[tuple[str, dict[str, str]]], at_once: int
) -> list[int]:
    """GET each (path, headers) from ``client``'s address, ``at_once`` at a time; the
    statuses."""
    transport = httpx.ASGITransport(app, client=client)
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        for start in range(0, len(requests), at_once):
            chunk = requests[start : start + at_once]
            answers = await asyncio.gather(*(http.get(p, headers=h) for p, h in chunk))
            statuses += [a.status_code for a in answers]
    return statuses


def get_all(app: FastAPI, client: tuple[str, int], requests: list, at_once: int = 1) -> list[int]:
    return asyncio.run(_get_all(app, client, requests, at_once))


async def get_one(app: FastAPI, client: tuple[str, int], headers: dict) -> httpx.Response:
    transport = httpx.ASGITransport(app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        return await http.get("/v1/datasets", headers=headers)


def fake_keys(n: int) -> list[tuple[str, dict[str, str]]]:
    return [("/v1/datasets", auth(f"fake-{uuid.uuid4().hex}")) for _ in range(n)]


def test_a_fake_key_flood_neither_resets_a_real_key_nor_reaches_the_database(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's run: bursts of 5, then 10,001 random fake keys. (One request a minute,
    not the issue's 30: the flood takes seconds here, and at 30 a minute the real key would
    refill its burst meanwhile by the clock alone.) Requests wait for an admission slot as
    long as they need: overload's 503 is tested on its own (test_overload.py), and a pause of
    the shared test process (a collection of its large heap) must not turn a 429 into a 503."""
    settings = {"rate_limit_per_minute": 1, "rate_limit_burst": 5, "admission_wait_s": 60.0}
    for api in make_api(sqlite_url, **settings):
        app = api.client.app
        real = [("/v1/datasets", auth(api.admin))] * 6
        assert get_all(app, USER, real) == [200] * 5 + [429]
        lookups = count_lookups(monkeypatch, deps)
        start = time.monotonic()
        flood = Counter(get_all(app, ATTACKER, fake_keys(10_001), at_once=50))
        # The failure limit's burst, and what it refilled while the flood ran.
        per_minute = Settings().auth_failures_per_minute
        allowed = per_minute + math.ceil((time.monotonic() - start) * per_minute / 60)
        assert flood[401] <= allowed and flood[429] >= 10_001 - allowed, flood
        assert len(lookups) == flood[401]  # a 429 costs no database lookup
        # The real key's bucket survived: no fresh burst.
        assert get_all(app, USER, real[:1]) == [429]
        # Only authenticated keys have buckets: one key, one failing address.
        assert app.state.limiter.sizes() == {"key": 1, "auth_failures": 1}


def test_an_address_over_its_failure_limit_gets_429_before_any_lookup(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for api in make_api(sqlite_url, auth_failures_per_minute=4):
        app = api.client.app
        lookups = count_lookups(monkeypatch, deps)
        statuses = get_all(app, ATTACKER, fake_keys(4))
        assert statuses == [401] * 4 and len(lookups) == 4
        response = asyncio.run(get_one(app, ATTACKER, auth("fake-again")))
        assert response.status_code == 429 and len(lookups) == 4
        error = error_of(response)
        assert error["code"] == "rate_limited" and error["limit"] == "auth_failures"
        assert "DPSYN_AUTH_FAILURES_PER_MINUTE" in error["message"]
        assert 1 <= int(response.headers["Retry-After"]) <= 60
        # Even a real key from that address waits (it is not looked up either) ...
        assert get_all(app, ATTACKER, [("/v1/datasets", auth(api.admin))]) == [429]
        assert len(lookups) == 4
        # ... while other addresses, and requests without a key, are untouched.
        assert get_all(app, USER, [("/v1/datasets", auth(api.admin))]) == [200]
        assert get_all(app, ATTACKER, [("/v1/datasets", {})]) == [401]


def test_without_a_key_limit_keys_are_not_limited_but_failures_are(api: Api) -> None:
    app = api.client.app
    assert set(get_all(app, USER, [("/v1/jobs", auth(api.admin))] * 80, at_once=8)) == {200}
    # The failure limit's burst, and what it refilled while the requests ran (a slow machine
    # refills more: a fixed bound failed once under load, 49 < 50).
    per_minute = Settings().auth_failures_per_minute
    start = time.monotonic()
    failures = Counter(get_all(app, ATTACKER, fake_keys(80), at_once=8))
    allowed = per_minute + math.ceil((time.monotonic() - start) * per_minute / 60)
    assert failures[429] >= 80 - allowed and failures[401] <= allowed, failures


# --- the dashboard -----------------------------------------------------------------------------


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def sign_in(client: TestClient, key: str) -> Any:
    page = client.get("/ui/login")
    assert page.status_code == 200, page.text
    return client.post(
        "/ui/login", data={"csrf": csrf_of(page.text), "api_key": key}, follow_redirects=False
    )


def test_the_dashboard_spends_the_keys_own_limit(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, rate_limit_per_minute=60, rate_limit_burst=6):
        client = api.client
        assert sign_in(client, api.reader).status_code == 303  # 1 of the key's 6
        pages = [client.get("/ui/prompts").status_code for _ in range(6)]
        assert pages == [200] * 5 + [429], pages
        limited = client.get("/ui/prompts")
        assert limited.status_code == 429 and "Retry-After" in limited.headers
        assert "DPSYN_RATE_LIMIT_PER_MINUTE" in limited.text
        # One bucket for the key, whichever door it comes through.
        assert client.get("/v1/prompts", headers=auth(api.reader)).status_code == 429
        assert client.get("/v1/prompts", headers=auth(api.admin)).status_code == 200


def _prompt_id(api: Api) -> str:
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    job = api.submit(dataset["id"])
    assert job.status_code == 201, job.text
    api.run_job(job.json()["id"])
    listed = api.client.get("/v1/prompts", headers=auth(api.admin)).json()
    return str(listed[0]["id"])


def test_the_dashboards_model_calls_have_a_stricter_limit(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, ui_model_calls_per_minute=2):
        prompt_id = _prompt_id(api)
        client = api.client
        assert sign_in(client, api.reader).status_code == 303
        page = client.get(f"/ui/prompts/{prompt_id}")
        csrf = csrf_of(page.text)
        form = {"csrf": csrf, "query": "what is it"}
        answers = [
            client.post(f"/ui/prompts/{prompt_id}/complete", data=form).status_code
            for _ in range(3)
        ]
        assert answers == [200, 200, 429], answers
        refused = client.post(
            f"/ui/prompts/{prompt_id}/complete", data=form, headers={"Accept": "application/json"}
        )
        assert refused.status_code == 429
        assert "DPSYN_UI_MODEL_CALLS_PER_MINUTE" in refused.json()["error"]["message"]
        assert client.get(f"/ui/prompts/{prompt_id}").status_code == 200  # pages still load
        # The API's own /complete is the key's limit's business, not this one's.
        api_call = client.post(
            f"/v1/prompts/{prompt_id}/complete",
            json={"query": "what is it"},
            headers=auth(api.reader),
        )
        assert api_call.status_code == 200, api_call.text


def test_sign_in_is_throttled_per_address(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for api in make_api(sqlite_url):
        lookups = count_lookups(monkeypatch, ui_session)
        attacker = TestClient(api.client.app, client=ATTACKER)
        answers = [sign_in(attacker, f"wrong-{i}").status_code for i in range(11)]
        assert answers == [401] * 10 + [429], answers
        assert len(lookups) == 10
        assert sign_in(attacker, api.admin).status_code == 429  # not even looked up
        assert len(lookups) == 10
        refused = sign_in(attacker, "wrong-again")
        assert "DPSYN_SIGNIN_FAILURES_PER_MINUTE" in refused.text
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        user = TestClient(api.client.app, client=USER)
        assert sign_in(user, api.admin).status_code == 303


# --- several API processes: one limit through Redis --------------------------------------------


@pytest.fixture
def two_apps(sqlite_url: str, redis_url: str) -> Iterator[Callable[..., tuple]]:
    """Two API apps (two limiters, as two processes have) on one database and one Redis."""
    opened: list[TestClient] = []

    def make(**settings: Any) -> tuple[TestClient, TestClient, str]:
        clients = []
        for _ in range(2):
            app = create_app(
                Settings(database_url=sqlite_url, limits_redis_url=redis_url, **settings),
                queue=RecordingQueue(sqlite_url),
                backend_provider=StaticProvider(FakeBackend()),
            )
            client = TestClient(app, client=USER)
            client.__enter__()
            opened.append(client)
            clients.append(client)
        with session_scope(sqlite_url) as session:
            tenant, _ = create_tenant(session, f"redis-{uuid.uuid4().hex[:8]}")
            _, key = create_api_key(session, tenant.id, KeyScope.ADMIN)
        return clients[0], clients[1], key

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def test_two_api_processes_share_one_key_limit_through_redis(two_apps) -> None:
    # One token a minute: no refill while the six requests run, however busy the machine (at
    # 60 a minute, six requests that took over a second on two loaded cores all passed).
    first, second, key = two_apps(rate_limit_per_minute=1, rate_limit_burst=4)
    assert first.app.state.limiter.kind == "redis"
    answers = [
        (first if i % 2 else second).get("/v1/datasets", headers=auth(key)).status_code
        for i in range(6)
    ]
    assert answers == [200] * 4 + [429] * 2, answers  # per process it would be 8


def test_two_api_processes_share_the_failure_limit_through_redis(two_apps) -> None:
    first, second, _key = two_apps(auth_failures_per_minute=3)
    # A fresh address for this run (the buckets live in Redis, which outlives the test).
    address = (f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.9", 1)
    answers = [
        get_all(app, address, fake_keys(1))[0]
        for app in (first.app, second.app, first.app, second.app)
    ]
    assert answers == [401, 401, 401, 429], answers


def test_an_unreachable_redis_falls_back_to_limits_in_memory(sqlite_url: str) -> None:
    closed = "redis://127.0.0.1:9/0"  # the discard port: nothing listens
    for api in make_api(
        sqlite_url, limits_redis_url=closed, rate_limit_per_minute=60, rate_limit_burst=3
    ):
        answers = [
            api.client.get("/v1/datasets", headers=auth(api.admin)).status_code for _ in range(4)
        ]
        assert answers == [200, 200, 200, 429], answers


def test_the_limiters_memory_is_bounded_and_no_flood_touches_a_keys_bucket() -> None:
    """The tables on their own, on a clock of the test's: 20,000 failing addresses fill
    their table to its bound and no further, and the key's empty bucket stays empty."""
    buckets = MemoryBuckets(max_addresses=1000)
    settings = Settings(rate_limit_per_minute=1, rate_limit_burst=2, auth_failures_per_minute=5)
    limiter = Limiter(settings, buckets)
    key, failures = limiter.key, limiter.auth_failures
    assert key is not None and failures is not None
    assert [buckets.take_at(key, "key-1", 0.0) for _ in range(2)] == [0.0, 0.0]
    assert buckets.take_at(key, "key-1", 0.0) > 0
    for i in range(20_000):
        buckets.take_at(failures, f"10.{i // 250}.{i % 250}.1", 1.0 + i * 1e-5)
    assert buckets.sizes() == {"key": 1, "auth_failures": 1000}
    assert buckets.take_at(key, "key-1", 3.0) > 0  # 3 s at one a minute: still empty
    # A full bucket is forgotten: after its refill time, and when given its last token back.
    buckets.take_at(key, "key-2", 200.0)
    assert buckets.sizes()["key"] == 1
    buckets.give_back_at(key, "key-2", 200.0)
    assert "key" not in buckets.sizes()


def test_client_addresses_group_ipv6_hosts_by_their_64() -> None:
    def address(host: str) -> str:
        return client_address({"type": "http", "client": (host, 1)})

    assert address("203.0.113.7") == "203.0.113.7"
    assert address("2001:db8:1:2:aaaa::1") == address("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert address("::ffff:203.0.113.7") == "203.0.113.7"
    assert address("testclient") == "testclient"
