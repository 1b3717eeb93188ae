"""``dpsyn serve``'s deployment settings, on the real command in its own process.

Forwarded client addresses come only from the proxies ``DPSYN_FORWARDED_ALLOW_IPS`` names
(none by default; uvicorn's own ``FORWARDED_ALLOW_IPS`` is not read), so a client on the same
host cannot pose as many addresses to the per-address failure limits. Production is one
deployment, not one per replica: without ``DPSYN_UI_SECRET`` it refuses to start, before it
writes a key of its own, migrates or binds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from app.settings import Settings
from tests.cli.live_server import free_port
from tests.workers.processes import http_ok

ROOT = Path(__file__).resolve().parents[2]
ADMIN_KEY = "dpsyn_admin-key-of-the-production-test-0123456789"
UI_SECRET = "u" * 40
FINGERPRINT_KEY = "f" * 40
PG_URL = "postgresql+psycopg://dpsyn@127.0.0.1:5432/dpsyn"  # never reached by these unit tests


def serve_env(port: int, **settings: str) -> dict[str, str]:
    """The environment of a ``dpsyn serve`` on ``port``: no ``DPSYN_*`` of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env.update(PYTHONPATH=str(ROOT), DPSYN_PORT=str(port), **settings)
    return env


def start_serve(cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from app.cli import main; main()", "serve"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def serving(cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """``dpsyn serve`` with ``env`` while the block runs, once it answers; yields its URL."""
    url = f"http://127.0.0.1:{env['DPSYN_PORT']}"
    process = start_serve(cwd, env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()
            if http_ok(f"{url}/healthz"):
                break
            assert time.monotonic() < deadline, "dpsyn serve did not answer /healthz"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=30)


def failed_checks(url: str, forwarded_for: list[str]) -> list[int]:
    """The statuses of one wrong key per request, each claiming to forward for an address."""
    statuses = []
    for i, address in enumerate(forwarded_for):
        headers = {"Authorization": f"Bearer wrong-key-{i}", "X-Forwarded-For": address}
        statuses.append(httpx.get(f"{url}/v1/datasets", headers=headers).status_code)
    return statuses


# --- Forwarded addresses only from configured proxies ----------------------------------------


def test_the_proxy_setting_is_a_list_of_addresses_and_networks_or_any() -> None:
    assert Settings().forwarded_allow_list() == []
    both = Settings(forwarded_allow_ips=" 10.0.0.5, ,10.1.0.0/16,::1 ")
    assert both.forwarded_allow_list() == ["10.0.0.5", "10.1.0.0/16", "::1"]
    assert Settings(forwarded_allow_ips=" * ").forwarded_allow_list() == ["*"]


@pytest.mark.parametrize("value", ["proxy.internal", "10.0.0.5/16", "*,10.0.0.5", "10.0.0.300"])
def test_a_proxy_that_uvicorn_would_never_match_is_refused(value: str) -> None:
    """A name, a network with host bits set, or a bad address would be compared by uvicorn as
    text and silently never trusted; '*' beside addresses is ambiguous."""
    with pytest.raises(ValidationError, match="DPSYN_FORWARDED_ALLOW_IPS"):
        Settings(forwarded_allow_ips=value)


def test_forwarded_addresses_count_only_from_configured_proxies(tmp_path) -> None:
    """From 127.0.0.1, wrong keys under a new X-Forwarded-For each: by default (even with
    uvicorn's FORWARDED_ALLOW_IPS=*) the connecting address is counted and its limit trips;
    with the proxy named, each forwarded client is counted on its own."""
    rotating = [f"203.0.113.{i}" for i in range(1, 7)]
    limit = {"DPSYN_AUTH_FAILURES_PER_MINUTE": "3", "FORWARDED_ALLOW_IPS": "*"}
    with serving(tmp_path, serve_env(free_port(), **limit)) as url:
        assert failed_checks(url, rotating) == [401] * 3 + [429] * 3
    proxied = {**limit, "DPSYN_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with serving(tmp_path, serve_env(free_port(), **proxied)) as url:
        assert failed_checks(url, rotating) == [401] * 6
        assert failed_checks(url, ["198.51.100.7"] * 4) == [401] * 3 + [429]


# --- Production: one deployment, one dashboard key -------------------------------------------


def test_production_settings_cannot_serve_without_the_ui_secret() -> None:
    production = Settings(
        environment="production", database_url=PG_URL, bootstrap_api_key=ADMIN_KEY
    )
    with pytest.raises(ValueError, match="DPSYN_UI_SECRET"):
        production.check_serving()
    with pytest.raises(ValueError, match="DPSYN_FINGERPRINT_KEY"):
        Settings(
            environment="production",
            database_url=PG_URL,
            bootstrap_api_key=ADMIN_KEY,
            ui_secret=UI_SECRET,
        ).check_serving()
    Settings(
        environment="production",
        database_url=PG_URL,
        bootstrap_api_key=ADMIN_KEY,
        ui_secret=UI_SECRET,
        fingerprint_key=FINGERPRINT_KEY,
    ).check_serving()
    Settings(database_url=PG_URL).check_serving()  # development keeps one in its folder


def test_production_serve_without_the_ui_secret_exits_before_it_writes_one(tmp_path) -> None:
    """An unreachable database: the refusal comes before any migration or connection."""
    env = serve_env(
        free_port(),
        DPSYN_ENVIRONMENT="production",
        DPSYN_DATABASE_URL="postgresql+psycopg://dpsyn@127.0.0.1:1/dpsyn",
        DPSYN_BOOTSTRAP_API_KEY=ADMIN_KEY,
    )
    process = start_serve(tmp_path, env)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode != 0, (stdout, stderr[-2000:])
    assert "error: production needs DPSYN_UI_SECRET" in stderr, stderr[-2000:]
    assert "API on" not in stderr
    assert not list(tmp_path.rglob("ui_secret"))


def test_production_serve_with_the_ui_secret_starts(tmp_path, postgres_url) -> None:
    env = serve_env(
        free_port(),
        DPSYN_ENVIRONMENT="production",
        DPSYN_DATABASE_URL=postgres_url,
        DPSYN_BOOTSTRAP_API_KEY=ADMIN_KEY,
        DPSYN_UI_SECRET=UI_SECRET,
        DPSYN_FINGERPRINT_KEY=FINGERPRINT_KEY,
    )
    with serving(tmp_path, env) as url:
        listed = httpx.get(f"{url}/v1/datasets", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert listed.status_code == 200
    assert not list(tmp_path.rglob("ui_secret"))
    assert not list(tmp_path.rglob("fingerprint_key"))
