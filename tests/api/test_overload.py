"""Capacity and overload (issue 10, item 2): pools sized to the request threads, 503 with
Retry-After instead of a 30 s queue and a 500, and a ``/healthz`` that answers throughout.

The timing goals (throughput, p99) live in ``bench/load.py``; these tests check behaviour,
made deterministic by holding the pool's connections or the gate's slots in the test.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import anyio
import anyio.to_thread
import httpx
import pytest
from fastapi import FastAPI

from app.api.overload import AdmissionGate
from app.llm.provider import StaticProvider
from app.main import create_app
from app.settings import Settings
from tests.api.conftest import BOOTSTRAP_KEY, Api, RecordingQueue, auth, error_of, make_api
from tests.synthesis.fake_backend import FakeBackend


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each test on the embedded store and on PostgreSQL (the real fixture)."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("postgres_url")


def _engines(app: FastAPI) -> list:
    return [app.state.sessions.kw["bind"], app.state.read_sessions.kw["bind"]]


def test_pools_and_thread_pool_follow_the_request_threads_setting(sqlite_url: str) -> None:
    settings = Settings(database_url=sqlite_url, request_threads=7, db_pool_timeout_s=0.25)
    assert (settings.max_concurrent_requests, settings.db_pool_size) == (7, 7)
    app = create_app(settings, queue=RecordingQueue(sqlite_url))
    for engine in _engines(app):
        assert engine.pool.size() == 7
        assert engine.pool.timeout() == 0.25

    async def threads_after_a_request() -> int:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://t"
        ) as client:
            assert (await client.get("/healthz")).status_code == 200
        return anyio.to_thread.current_default_thread_limiter().total_tokens

    # The gate sized the thread pool of the event loop that served the request.
    assert asyncio.run(threads_after_a_request()) == 7


def test_a_gate_larger_than_the_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="MAX_CONCURRENT_REQUESTS"):
        Settings(max_concurrent_requests=50, db_pool_size=10)


@pytest.fixture
def small_api(store_url: str) -> Iterator[Api]:
    """An app with two request threads, two connections per pool and a short checkout."""
    yield from make_api(store_url, request_threads=2, db_pool_timeout_s=0.3)


def test_a_saturated_pool_answers_503_with_retry_after_fast_and_healthz_answers(
    small_api: Api,
) -> None:
    api = small_api
    app = api.client.app
    read_engine = app.state.read_sessions.kw["bind"]
    held = [read_engine.connect() for _ in range(2)]  # the whole pool, as stuck requests would
    try:
        start = time.monotonic()
        response = api.client.get("/v1/prompts", headers=auth(api.reader))
        elapsed = time.monotonic() - start
        assert response.status_code == 503, response.text
        assert error_of(response)["code"] == "overloaded"
        assert response.headers["Retry-After"] == "1"
        assert elapsed < 5  # the pool's timeout (0.3 s), not 30 s

        health = api.client.get("/healthz")
        assert health.status_code == 200, health.text
        assert health.json() == {"status": "ok", "database": "reachable"}
    finally:
        for conn in held:
            conn.close()
    assert api.client.get("/v1/prompts", headers=auth(api.reader)).status_code == 200


def test_a_request_needs_one_connection_at_a_time(store_url: str) -> None:
    """With one connection per pool and no waiting for it, reads and writes still work: the
    key check returns its connection before the handler takes one."""
    for api in make_api(store_url, request_threads=1, db_pool_timeout_s=0.2):
        assert api.client.get("/v1/prompts", headers=auth(api.reader)).status_code == 200
        created = api.client.post("/v1/keys", json={}, headers=auth(api.admin))
        assert created.status_code == 201, created.text
        listed = api.client.get("/v1/keys", headers=auth(api.admin))
        assert created.json()["id"] in {key["id"] for key in listed.json()}


def test_more_clients_than_threads_get_answers_not_500s(store_url: str) -> None:
    """The collapse of issue 10 in miniature: 120 concurrent requests, more than the request
    threads (anyio's 40 before the fix), with the default settings. Before the fix the
    threads all waited for a connection held by requests that needed a thread to give it
    back: nothing moved until the 30 s pool timeout answered 500."""
    settings = Settings(database_url=store_url, bootstrap_api_key=BOOTSTRAP_KEY)
    app = create_app(
        settings,
        queue=RecordingQueue(store_url),
        backend_provider=StaticProvider(FakeBackend()),
    )

    async def main() -> tuple[Counter, float, int]:
        transport = httpx.ASGITransport(app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as client,
        ):
            headers = auth(BOOTSTRAP_KEY)

            async def one() -> int:
                return (await client.get("/v1/prompts", headers=headers)).status_code

            start = time.monotonic()
            with anyio.fail_after(25):  # the old code answers after 30 s
                statuses = await asyncio.gather(*(one() for _ in range(120)))
            elapsed = time.monotonic() - start
            health = (await client.get("/healthz")).status_code
        return Counter(statuses), elapsed, health

    statuses, elapsed, health = asyncio.run(main())
    assert set(statuses) <= {200, 503}, statuses
    assert statuses[200] >= settings.max_concurrent_requests, statuses  # a gate's worth
    assert health == 200
    assert elapsed < 20, elapsed


# -- the gate on its own: slots held by the test -----------------------------------------------


def _gated(limit: int, max_waiting: int, wait_s: float) -> tuple[AdmissionGate, asyncio.Event]:
    release = asyncio.Event()

    async def slow_app(scope, receive, send) -> None:
        if scope["path"] != "/healthz":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    gate = AdmissionGate(
        slow_app, limit=limit, max_waiting=max_waiting, wait_s=wait_s, retry_after_s=3
    )
    return gate, release


async def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_gate_admits_its_limit_queues_a_few_and_sheds_the_rest() -> None:
    async def main() -> None:
        gate, release = _gated(limit=2, max_waiting=1, wait_s=10)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(gate), base_url="http://t"
        ) as client:
            running = [asyncio.create_task(client.get("/x")) for _ in range(2)]
            await _until(lambda: gate.active == 2)
            waiting = asyncio.create_task(client.get("/x"))
            await _until(lambda: len(gate.waiters) == 1)

            start = time.monotonic()
            shed = await client.get("/x")  # gate full, queue full: refused at once
            assert time.monotonic() - start < 1
            assert shed.status_code == 503
            assert shed.headers["Retry-After"] == "3"
            assert error_of(shed) == {
                "code": "overloaded",
                "message": "the server is at capacity (too many requests in progress); "
                "retry after 3 s",
                "retry_after_s": 3,
                "type": "server_error",  # OpenAI's shape too (app.api.errors)
                "param": None,
            }
            assert (await client.get("/healthz")).status_code == 200  # never gated

            release.set()  # the two finish; the waiter gets a slot handed over
            assert [r.status_code for r in await asyncio.gather(*running, waiting)] == [200] * 3
            assert gate.active == 0 and not gate.waiters

    asyncio.run(main())


def test_gate_waits_at_most_wait_s_then_503() -> None:
    async def main() -> None:
        gate, release = _gated(limit=1, max_waiting=5, wait_s=0.2)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(gate), base_url="http://t"
        ) as client:
            holder = asyncio.create_task(client.get("/x"))
            await _until(lambda: gate.active == 1)
            start = time.monotonic()
            late = await client.get("/x")
            assert late.status_code == 503
            assert 0.15 < time.monotonic() - start < 2
            assert not gate.waiters  # the one that gave up left the queue
            release.set()
            assert (await holder).status_code == 200
            assert (await client.get("/x")).status_code == 200
            assert gate.active == 0

    asyncio.run(main())
