"""``/healthz`` under many probes (issue 42: 1.2-1.8 s at 500 clients, each probe waiting for
a thread and the one health connection): probes that come together share one database check,
and a recent success answers at once; a failure is never reused."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import app.api.routes.health as health
from tests.api.conftest import Api


async def _probes(api: Api, n: int) -> list[int]:
    transport = httpx.ASGITransport(api.client.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        answers = await asyncio.gather(*(http.get("/healthz") for _ in range(n)))
    return [a.status_code for a in answers]


def test_probes_together_share_one_check(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    pings: list[Any] = []
    real = health._ping

    def counted(engine: Any) -> None:
        pings.append(engine)
        real(engine)

    monkeypatch.setattr(health, "_ping", counted)
    monkeypatch.setattr(health, "HEALTH_FRESH_S", 0.0)  # no reuse: only sharing
    assert asyncio.run(_probes(api, 50)) == [200] * 50
    assert 1 <= len(pings) <= 3, len(pings)  # one per wave, not one per probe
    monkeypatch.setattr(health, "HEALTH_FRESH_S", 60.0)
    pings.clear()
    assert asyncio.run(_probes(api, 20)) == [200] * 20
    assert len(pings) <= 1  # the success above is fresh: at most one check


def test_a_failed_check_is_not_reused(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.exc import OperationalError

    def down(_engine: Any) -> None:
        raise OperationalError("SELECT 1", {}, Exception("gone"))

    monkeypatch.setattr(health, "HEALTH_FRESH_S", 60.0)
    api.client.app.state.health_ok_at = -1e9  # no fresh success
    monkeypatch.setattr(health, "_ping", down)
    assert api.client.get("/healthz").status_code == 503
    monkeypatch.undo()
    monkeypatch.setattr(health, "HEALTH_FRESH_S", 60.0)
    assert api.client.get("/healthz").status_code == 200  # checked again, not the failure
