"""The organisation's dashboard (issue 34) over HTTP: an org:read sign-in lands on /ui/fleet,
which lists every tenant's budgeted datasets (filtered and sorted on the server, with the
all-ledgers CSV), and every other page refuses it; tenant sign-ins cannot open the fleet; the
keys page shows names and last use. Responses go through the recording client, which fails
the test if any record text appears."""

from __future__ import annotations

import csv
import io
import re
import time

import pytest
from fastapi.testclient import TestClient

from app.db.models import KeyScope
from app.db.session import session_scope
from app.services.tenants import create_key_for, create_tenant
from tests.api.conftest import Api, RecordingClient, auth, make_api, toy_rows


@pytest.fixture
def api(sqlite_url: str):
    yield from make_api(sqlite_url)


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def _sign_in(client: TestClient, key: str) -> str:
    """Sign in; where the dashboard's home sends the session."""
    page = client.get("/ui/login")
    response = client.post(
        "/ui/login", data={"csrf": _csrf(page.text), "api_key": key}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    home = client.get("/ui", follow_redirects=False)
    assert home.status_code == 303
    return str(home.headers["location"])


def _org_key(api: Api) -> str:
    with session_scope(api.url) as session:
        tenant, _ = create_tenant(session, f"org-{time.monotonic_ns()}")
        return create_key_for(session, tenant, KeyScope.ORG_READ, "org dashboard")[1]


def _spending(api: Api) -> tuple[str, str]:
    a = api.upload(name="alpha-reviews")["id"]
    assert api.budget(a, 2.0, warn_threshold=0.4).status_code == 200
    assert api.submit(a, 1.0).status_code == 201  # reserved: warn, one job queued
    b = api.upload(key=api.other, name="beta-tickets")["id"]
    assert api.budget(b, 5.0, key=api.other).status_code == 200
    return a, b


def _rows(html: str) -> list[tuple[str, str]]:
    """(dataset ID, level) of each row of the fleet table, in order."""
    return re.findall(r'data-dataset-id="([0-9a-f]+)" data-level="(\w+)"', html)


def test_an_org_sign_in_lands_on_the_fleet_of_every_tenant(api: Api) -> None:
    a, b = _spending(api)
    client = RecordingClient(api.client.app)
    assert _sign_in(client, _org_key(api)) == "/ui/fleet"
    page = client.get("/ui/fleet")
    assert page.status_code == 200, page.text
    assert dict(_rows(page.text)) == {a: "warn", b: "ok"}
    assert "alpha-reviews" in page.text and "beta-tickets" in page.text
    assert 'id="nav-fleet"' in page.text and 'id="nav-datasets"' not in page.text
    assert "+1 queued" in page.text  # the reserved job waits
    assert 'href="/ui/fleet/ledgers.csv"' in page.text
    posts = re.findall(r'<form method="post" action="([^"]+)"', page.text)
    assert posts == ["/ui/logout"]  # read-only: signing out is the one form

    # Filters and sorting, on the server.
    only_warn = client.get("/ui/fleet?level=warn")
    assert _rows(only_warn.text) == [(a, "warn")]
    tenant_b = re.search(r'data-tenant="([^"]+)" data-dataset-id="' + b, page.text)
    assert tenant_b
    by_tenant = client.get("/ui/fleet", params={"tenant": tenant_b.group(1)})
    assert _rows(by_tenant.text) == [(b, "ok")]
    fullest = client.get("/ui/fleet?sort=used&order=desc")
    assert [d for d, _ in _rows(fullest.text)] == [a, b]
    emptiest = client.get("/ui/fleet?sort=used&order=asc")
    assert [d for d, _ in _rows(emptiest.text)] == [b, a]
    bad = client.get("/ui/fleet?level=exploded")
    assert bad.status_code == 422 and "level: one of ok, warn, over" in bad.text

    exported = client.get("/ui/fleet/ledgers.csv")
    assert exported.status_code == 200
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert {row["dataset_id"] for row in rows} == {a}  # only A has a ledger entry
    client.assert_no_private_text()


@pytest.mark.parametrize(
    "path",
    ["/ui/datasets", "/ui/jobs", "/ui/prompts", "/ui/advice", "/ui/keys", "/ui/datasets/x"],
)
def test_every_tenant_page_refuses_an_org_sign_in(api: Api, path: str) -> None:
    client = RecordingClient(api.client.app)
    _sign_in(client, _org_key(api))
    page = client.get(path)
    assert page.status_code == 403, page.text
    assert "org:read sign-in sees the fleet page only" in page.text
    assert 'id="nav-fleet"' in page.text  # still signed in, offered the way back


def test_tenant_sign_ins_cannot_open_the_fleet(api: Api) -> None:
    for key in (api.admin, api.reader):
        client = RecordingClient(api.client.app)
        _sign_in(client, key)
        for path in ("/ui/fleet", "/ui/fleet/ledgers.csv"):
            page = client.get(path)
            assert page.status_code == 403, (path, page.text)
            assert "needs an org:read key" in page.text


def test_the_keys_page_shows_names_and_last_use(api: Api) -> None:
    created = api.client.post(
        "/v1/keys", json={"name": "nightly <export>"}, headers=auth(api.admin)
    ).json()
    client = RecordingClient(api.client.app)
    _sign_in(client, api.admin)
    page = client.get("/ui/keys")
    assert page.status_code == 200, page.text
    row = re.search(rf'data-key-id="{created["id"]}">(.*?)</tr>', page.text, re.S)
    assert row, page.text
    assert "nightly &lt;export&gt;" in row.group(1)  # escaped
    assert "never" in row.group(1)
    own = re.search(r'class="last-used">([^<]+)</td>', page.text)
    assert own  # the admin key signed in: its use is recorded (in the background)
    reader = RecordingClient(api.client.app)
    _sign_in(reader, api.reader)
    assert reader.get("/ui/keys").status_code == 403


def test_a_shared_budget_names_the_datasets_it_is_shared_with(api: Api) -> None:
    """Records uploaded twice share one budget (linked at upload): each row names the other
    dataset, its ID beside the name, rather than print the ID alone (issue 55)."""
    rows = toy_rows()
    owner = api.upload(rows, name="tickets-march")["id"]
    assert api.budget(owner, 3.0).status_code == 200
    linked = api.upload(rows, name="tickets-march-again", budget_of=owner)["id"]
    client = RecordingClient(api.client.app)
    _sign_in(client, _org_key(api))
    page = client.get("/ui/fleet").text
    shown = {
        dataset_id: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)).strip()
        for dataset_id, body in re.findall(
            r'<tr [^>]*data-dataset-id="([0-9a-f]+)"[^>]*>(.*?)</tr>', page, re.S
        )
    }
    assert f"budget shared with tickets-march-again {linked}" in shown[owner]
    assert f"shares the budget of tickets-march {owner}" in shown[linked]
