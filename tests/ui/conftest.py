"""A real browser against a real server: Debian's Chromium driven through its chromedriver
(Selenium is given the driver's path, so it never downloads one), and the app served by
uvicorn on a free local port with an in-process worker on a fake backend.

Without Chromium the browser tests skip, unless ``REQUIRE_SERVICES=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.db.models import KeyScope
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.services.tenants import create_api_key, create_tenant
from tests.synthesis.fake_backend import FakeBackend

CHROMIUM = os.environ.get("DPSYN_TEST_CHROMIUM") or shutil.which("chromium") or ""
CHROMEDRIVER = os.environ.get("DPSYN_TEST_CHROMEDRIVER") or shutil.which("chromedriver") or ""


def require_browser() -> None:
    """Skip (or fail under REQUIRE_SERVICES=1) without Chromium, its driver or Selenium."""
    missing = [
        name
        for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER))
        if not (path and os.access(path, os.X_OK))
    ]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed (scripts/setup.sh installs them)"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} and REQUIRE_SERVICES=1")
    pytest.skip(reason)


class GatedBackend(FakeBackend):
    """The fake backend, holding every generation step until the test opens the gate: the
    browser can see a job queued or running, then watch it finish."""

    def __init__(self) -> None:
        super().__init__(stop_after=None)
        self.gate = threading.Event()

    def next_token_probs(self, prompts: Any, token_sets: Any) -> Any:
        if not self.gate.wait(timeout=60):
            raise TimeoutError("the test never opened the gate")
        return super().next_token_probs(prompts, token_sets)


@dataclass
class LiveServer:
    base: str
    url: str  # the database
    backend: GatedBackend
    admin: str  # tenant A
    reader: str  # tenant A, prompts:read
    other: str  # tenant B


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    require_browser()
    import uvicorn

    from app.db.migrate import upgrade
    from app.main import create_app
    from app.settings import Settings
    from workers.inprocess import InProcessQueue

    url = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'dpsyn.db'}"
    upgrade(url)
    backend = GatedBackend()
    queue = InProcessQueue(
        database_url=url, provider=StaticProvider(backend), progress_interval_s=0.0
    ).start()
    app = create_app(
        Settings(database_url=url),
        queue=queue,
        backend_provider=StaticProvider(FakeBackend(stop_after=None)),
    )
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="dashboard-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    suffix = uuid.uuid4().hex[:8]
    with session_scope(url) as session:
        tenant, admin = create_tenant(session, f"tenant-a-{suffix}")
        _, reader = create_api_key(session, tenant.id, KeyScope.PROMPTS_READ)
        _, other = create_tenant(session, f"tenant-b-{suffix}")
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", url, backend, admin, reader, other)
    finally:
        backend.gate.set()
        server.should_exit = True
        thread.join(timeout=10)
        queue.close(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
