"""Signing out revokes the session on the server (issue 21, item 7b).

Before, sign-out only asked the browser to delete its cookie: the signed cookie itself stayed
valid until it expired, so a copy of it (a shared machine, a proxy log, malware) replayed
after sign-out still opened the dashboard. Each sign-in is now a row of ``ui_sessions``;
sign-out deletes it, and a cookie whose row is gone is refused. On the embedded store and on
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.ui.session import SESSION_COOKIE
from tests.api.conftest import Api, make_api
from tests.ui.test_pages import csrf_of, sign_in


@pytest.fixture(params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    yield from make_api(url, ui_secret="s" * 40)


def _replayed(api: Api, cookie: str) -> TestClient:
    """Another browser holding a copy of ``cookie``."""
    other = TestClient(api.client.app)
    other.cookies.set(SESSION_COOKIE, cookie, path="/ui")
    return other


def test_a_cookie_replayed_after_sign_out_is_refused(api: Api) -> None:
    client = api.client
    csrf = sign_in(client, api.admin)
    cookie = client.cookies.get(SESSION_COOKIE)
    assert cookie
    thief = _replayed(api, cookie)
    assert thief.get("/ui/datasets").status_code == 200  # a copy works while signed in
    out = client.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    page = thief.get("/ui/datasets", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/ui/login?next=%2Fui%2Fdatasets"
    # Forms too: the CSRF token of the ended session opens nothing.
    post = thief.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert post.status_code == 401
    status = thief.get("/ui/prompts", headers={"Accept": "application/json"})
    assert status.status_code == 401


def test_signing_out_ends_that_session_only(api: Api) -> None:
    laptop, phone = api.client, TestClient(api.client.app)
    csrf = sign_in(laptop, api.admin)
    sign_in(phone, api.admin)
    laptop.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert phone.get("/ui/datasets").status_code == 200
    assert laptop.get("/ui/datasets", follow_redirects=False).status_code == 303


def test_a_session_is_known_to_every_replica(api: Api) -> None:
    """Sessions live in the database, so a second app (a replica with the same secret) honours
    a sign-in made on the first, and a sign-out made on the first."""
    from app.main import create_app
    from app.settings import Settings
    from tests.api.conftest import RecordingQueue

    client = api.client
    csrf = sign_in(client, api.admin)
    cookie = client.cookies.get(SESSION_COOKIE)
    assert cookie
    replica = create_app(
        Settings(database_url=api.url, ui_secret="s" * 40), queue=RecordingQueue(api.url)
    )
    elsewhere = TestClient(replica)
    elsewhere.cookies.set(SESSION_COOKIE, cookie, path="/ui")
    assert elsewhere.get("/ui/datasets").status_code == 200
    token = csrf_of(elsewhere.get("/ui/datasets").text)
    assert token == csrf
    elsewhere.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
    assert client.get("/ui/datasets", follow_redirects=False).status_code == 303
