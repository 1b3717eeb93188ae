"""Named keys, their last use, and the organisation's read-only key (issue 34).

* ``POST /v1/keys`` takes a name (trimmed, 1-100 printable characters; a 422 naming the rule
  otherwise, nothing stored); lists show it and ``last_used_at``, which authentication writes
  at most once a minute per key, also when the key is served from the lookup cache.
* An ``org:read`` key reads every tenant's budgets (``GET /v1/budgets?all_tenants=true``, the
  all-ledgers CSV) and nothing else: every other route answers it 403. Only the operator
  creates one; a tenant's admin key asking for one is a 403, and an admin key asking
  ``all_tenants`` is a 403 too (it stays confined to its tenant).
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.routing import APIRoute
from sqlalchemy import func, select, update

from app.api.deps import get_principal
from app.api.routes import advice, budgets, datasets, health, jobs, keys, prompts
from app.db.models import ApiKey, KeyScope, Tenant
from app.db.session import session_scope
from app.services import key_cache
from app.services.key_cache import LastUsedThrottle
from app.services.tenants import create_key_for, create_tenant
from tests.api.conftest import Api, auth, error_of, make_api


@pytest.fixture(params=["sqlite", "postgres"])
def both(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API on SQLite and on PostgreSQL (the ledger's and the last-use write's SQL)."""
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    yield from make_api(url)


def _keys(api: Api, key: str | None = None) -> list[dict[str, Any]]:
    response = api.client.get("/v1/keys", headers=auth(key or api.admin))
    assert response.status_code == 200, response.text
    return list(response.json())


def _key_count(api: Api) -> int:
    with session_scope(api.url) as session:
        return int(session.scalar(select(func.count()).select_from(ApiKey)) or 0)


def _org_key(api: Api, name: str = "finance") -> tuple[str, str]:
    """An org:read key made as the operator makes it, for a tenant of its own; (key, tenant)."""
    with session_scope(api.url) as session:
        tenant, _ = create_tenant(session, f"org-{name}-{time.monotonic_ns()}")
        _, raw = create_key_for(session, tenant, KeyScope.ORG_READ, f"{name} dashboard")
        return raw, tenant.name


# --- named keys ------------------------------------------------------------------------------


def test_a_key_is_created_with_a_trimmed_name_and_listed_with_it(api: Api) -> None:
    created = api.client.post(
        "/v1/keys", json={"scope": "prompts:read", "name": "  CI reader  "}, headers=auth(api.admin)
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == "CI reader" and body["last_used_at"] is None
    unnamed = api.client.post("/v1/keys", json={}, headers=auth(api.admin)).json()
    assert unnamed["name"] is None
    listed = {row["id"]: row for row in _keys(api)}
    assert listed[body["id"]]["name"] == "CI reader"
    assert listed[unnamed["id"]]["name"] is None
    assert {"name", "last_used_at"} <= set(listed[body["id"]])


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("   ", "must not be blank"),
        ("", "must not be blank"),
        ("x" * 101, "more than the 100"),
        ("tab\there", "not printable"),
        ("two\nlines", "not printable"),
        ("nul\x00", "not printable"),
        ("bell\x07", "not printable"),
    ],
)
def test_a_bad_name_is_a_422_naming_the_rule_and_nothing_is_stored(
    api: Api, name: str, says: str
) -> None:
    before = _key_count(api)
    response = api.client.post("/v1/keys", json={"name": name}, headers=auth(api.admin))
    assert response.status_code == 422, response.text
    message = error_of(response)["message"]
    assert "name" in message and says in message, message
    assert _key_count(api) == before


def test_a_name_of_100_characters_and_unicode_is_accepted(api: Api) -> None:
    name = "é" * 99 + "✓"
    response = api.client.post("/v1/keys", json={"name": name}, headers=auth(api.admin))
    assert response.status_code == 201, response.text
    assert response.json()["name"] == name


# --- last use --------------------------------------------------------------------------------


def _last_used(api: Api, key_id: str) -> Any:
    with session_scope(api.url) as session:
        key = session.get(ApiKey, key_id)
        assert key is not None
        return key.last_used_at


def _wait_last_used(api: Api, key_id: str, changed_from: Any, timeout: float = 5.0) -> Any:
    """The stored last use once it differs from ``changed_from`` (the write is in the
    background); fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = _last_used(api, key_id)
        if value != changed_from or time.monotonic() > deadline:
            assert value != changed_from, "last_used_at was never written"
            return value
        time.sleep(0.02)


def _settle(api: Api) -> None:
    """Wait for the app's background last-use writes in flight (none may be left)."""
    deadline = time.monotonic() + 5
    while getattr(api.client.app.state, "last_used_writes", set()):
        assert time.monotonic() < deadline, "a last-use write never finished"
        time.sleep(0.02)


def test_last_use_is_written_at_most_once_a_minute_even_past_the_cache(
    both: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = both
    created = api.client.post("/v1/keys", json={"name": "app"}, headers=auth(api.admin)).json()
    key, key_id = created["key"], created["id"]
    assert _last_used(api, key_id) is None
    assert api.client.get("/v1/prompts", headers=auth(key)).status_code == 200
    first = _wait_last_used(api, key_id, None)
    listed = {row["id"]: row for row in _keys(api)}
    assert listed[key_id]["last_used_at"] is not None

    # Make the stored time old, as if written long ago: only a write would change it back.
    old = first - timedelta(minutes=10)
    with session_scope(api.url) as session:
        session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=old))
    clock = key_cache.clock()
    # 30 s on: the cached lookup (5 s) has expired, so the key is looked up in the database
    # again, but the throttle outlives the cache: no write.
    monkeypatch.setattr(key_cache, "clock", lambda: clock + 30.0)
    for _ in range(5):
        assert api.client.get("/v1/prompts", headers=auth(key)).status_code == 200
    _settle(api)
    assert _last_used(api, key_id) == old
    # A minute on: the next use writes again.
    monkeypatch.setattr(key_cache, "clock", lambda: clock + 61.0)
    assert api.client.get("/v1/prompts", headers=auth(key)).status_code == 200
    assert _wait_last_used(api, key_id, old) > old


def test_the_stored_time_throttles_other_processes_too(api: Api) -> None:
    """A second process (a fresh throttle) does not write a use less than a minute old."""
    from app.db.models import now
    from app.services.tenants import create_api_key, touch_last_used

    with session_scope(api.url) as session:
        tenant_id = session.scalars(select(Tenant.id)).first()
        assert tenant_id is not None
        key_id = create_api_key(session, tenant_id, KeyScope.PROMPTS_READ)[0].id
    with session_scope(api.url) as session:
        at = now()
        assert touch_last_used(session, key_id, at) is True
        assert touch_last_used(session, key_id, at + timedelta(seconds=30)) is False
        assert touch_last_used(session, key_id, at + timedelta(seconds=61)) is True


def test_the_throttle_lets_one_use_a_minute_through() -> None:
    throttle = LastUsedThrottle(max_entries=10, interval_s=60)
    assert throttle.due("k") is True
    assert throttle.due("k") is False
    assert throttle.due("other") is True


# --- the organisation's key ------------------------------------------------------------------


def test_a_tenant_admin_cannot_mint_an_org_key(api: Api) -> None:
    before = _key_count(api)
    response = api.client.post(
        "/v1/keys", json={"scope": "org:read", "name": "x"}, headers=auth(api.admin)
    )
    assert response.status_code == 403, response.text
    error = error_of(response)
    assert error["code"] == "org_key_operator_only"
    assert "only the operator" in error["message"] and "dpsyn admin keys create" in error["message"]
    assert _key_count(api) == before


def _tenant_name(api: Api, key: str) -> str:
    with session_scope(api.url) as session:
        tenant_id = session.scalars(
            select(ApiKey.tenant_id).where(ApiKey.key_hash == _hash(key))
        ).one()
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        return tenant.name


def _hash(key: str) -> str:
    from app.services.tenants import hash_key

    return hash_key(key)


def _two_tenants_spending(api: Api) -> tuple[str, str]:
    """Tenant A's dataset past its warn threshold (a job reserved), tenant B's below it."""
    a = api.upload(name="alpha")["id"]
    assert api.budget(a, 2.0, warn_threshold=0.4).status_code == 200
    assert api.submit(a, 1.0).status_code == 201
    b = api.upload(key=api.other, name="beta")["id"]
    assert api.budget(b, 5.0, key=api.other).status_code == 200
    return a, b


def test_an_org_key_reads_every_tenants_budgets(both: Api) -> None:
    api = both
    a, b = _two_tenants_spending(api)
    org, _ = _org_key(api)
    response = api.client.get("/v1/budgets?all_tenants=true", headers=auth(org))
    assert response.status_code == 200, response.text
    rows = {row["dataset_id"]: row for row in response.json()}
    assert {a, b} <= set(rows)
    assert rows[a]["tenant_name"] == _tenant_name(api, api.admin)
    assert rows[b]["tenant_name"] == _tenant_name(api, api.other)
    assert rows[a]["tenant_id"] != rows[b]["tenant_id"]
    assert rows[a]["level"] == "warn" and rows[a]["spent"] > 0 and rows[a]["live_jobs"] == 1
    assert rows[b]["level"] == "ok" and rows[b]["spent"] == 0
    # The dataset's count release, its own part of the spend (issue 41); b drew none.
    assert 0 < rows[a]["counts_epsilon"] < rows[a]["spent"] and rows[b]["counts_epsilon"] == 0
    # The existing fields are unchanged.
    assert set(rows[a]) == {
        "dataset_id", "name", "epsilon", "spent", "remaining", "spent_fraction",
        "warn_threshold", "level", "live_jobs", "tenant_id", "tenant_name", "counts_epsilon",
        "budget_dataset_id", "linked_datasets",  # budgets follow the records (issue 51)
    }  # fmt: skip

    alerting = api.client.get(
        "/v1/budgets?all_tenants=true&over_threshold=true", headers=auth(org)
    ).json()
    # The PostgreSQL database is the test process's (tests/conftest.py): the other tests'
    # datasets on it are every tenant's too, so only these two are checked by name.
    assert [row["dataset_id"] for row in alerting if row["dataset_id"] in {a, b}] == [a]
    assert alerting and all(row["level"] != "ok" for row in alerting)


def test_the_all_ledgers_csv_has_every_tenants_ledger(both: Api) -> None:
    api = both
    a, b = _two_tenants_spending(api)
    assert api.submit(b, 0.5, key=api.other).status_code == 201
    org, _ = _org_key(api)
    response = api.client.get("/v1/fleet/ledgers.csv", headers=auth(org))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert list(rows[0])[:5] == ["tenant_id", "tenant_name", "dataset_id", "dataset_name", "entry"]
    by_dataset = {row["dataset_id"]: row for row in rows}
    assert by_dataset[a]["tenant_name"] == _tenant_name(api, api.admin)
    assert by_dataset[b]["tenant_name"] == _tenant_name(api, api.other)
    assert by_dataset[a]["kind"] == "reserve" and by_dataset[a]["dataset_name"] == "alpha"
    # calibrated within its relative tolerance (5e-3) below the target, never above
    assert 0.5 * (1 - 5e-3) <= float(by_dataset[b]["job_epsilon"]) <= 0.5
    # Tenant keys cannot read it.
    for key in (api.admin, api.reader):
        assert api.client.get("/v1/fleet/ledgers.csv", headers=auth(key)).status_code == 403
    # One team's export, by name or ID (issue 43: none for a privacy officer)
    name = _tenant_name(api, api.other)
    one = api.client.get(f"/v1/fleet/ledgers.csv?tenant={name}", headers=auth(org))
    assert one.status_code == 200, one.text
    teams = {row["tenant_name"] for row in csv.DictReader(io.StringIO(one.text))}
    assert teams == {name}
    missing = api.client.get("/v1/fleet/ledgers.csv?tenant=nobody", headers=auth(org))
    assert missing.status_code == 404 and "nobody" in error_of(missing)["message"]


def test_an_admin_key_stays_in_its_tenant(api: Api) -> None:
    a, _ = _two_tenants_spending(api)
    refused = api.client.get("/v1/budgets?all_tenants=true", headers=auth(api.admin))
    assert refused.status_code == 403
    error = error_of(refused)
    assert error["code"] == "org_key_required" and "org:read" in error["message"]
    assert "own tenant" in error["message"]
    refused = api.client.get(
        "/v1/budgets?all_tenants=true&over_threshold=true", headers=auth(api.admin)
    )
    assert refused.status_code == 403
    own = api.client.get("/v1/budgets", headers=auth(api.admin)).json()
    assert [row["dataset_id"] for row in own] == [a]
    assert own[0]["tenant_name"] == _tenant_name(api, api.admin)
    reader = api.client.get("/v1/budgets?all_tenants=true", headers=auth(api.reader))
    assert reader.status_code == 403


def test_an_org_key_must_ask_for_all_tenants(api: Api) -> None:
    org, _ = _org_key(api)
    response = api.client.get("/v1/budgets", headers=auth(org))
    assert response.status_code == 403
    assert "all_tenants=true" in error_of(response)["message"]


def test_an_org_key_cannot_write_or_read_a_tenants_data(api: Api) -> None:
    a, _ = _two_tenants_spending(api)
    org, _ = _org_key(api)
    headers = auth(org)
    refusals = [
        api.client.post("/v1/datasets", json={"task": "trec", "records": []}, headers=headers),
        api.client.post(
            "/v1/jobs",
            json={"dataset_id": a, "method": "tang", "epsilon": 0.1, "shots": 1},
            headers=headers,
        ),
        api.client.get(f"/v1/datasets/{a}", headers=headers),
        api.client.get(f"/v1/datasets/{a}/budget", headers=headers),
        api.client.get(f"/v1/datasets/{a}/budget/ledger.csv", headers=headers),
        api.client.put(f"/v1/datasets/{a}/budget", json={"epsilon": 9.0}, headers=headers),
        api.client.get("/v1/jobs", headers=headers),
        api.client.get("/v1/prompts", headers=headers),
        api.client.get("/v1/keys", headers=headers),
        api.client.post("/v1/keys", json={"scope": "org:read"}, headers=headers),
    ]
    for response in refusals:
        assert response.status_code == 403, (response.request.url, response.text)
        assert "org:read" in error_of(response)["message"]
    # Nothing changed: the budget is as tenant A set it.
    assert api.budget(a, 2.0, warn_threshold=0.4).status_code == 200


ROUTE_MODULES = (advice, budgets, datasets, health, jobs, keys, prompts)


def _placeholder(path: str) -> str:
    return path.replace("{", "").replace("}", "")  # /v1/jobs/{job_id} -> /v1/jobs/job_id


def test_every_other_route_refuses_an_org_key(api: Api) -> None:
    """Every route that takes a key, bar the two organisation reads, answers an org key 403
    before anything else (its dependency runs before the body or the path's ID is read)."""
    org, _ = _org_key(api)
    allowed = {("GET", "/v1/budgets"), ("GET", "/v1/fleet/ledgers.csv")}
    checked = 0
    for route in (r for module in ROUTE_MODULES for r in module.router.routes):
        if not isinstance(route, APIRoute) or not _takes_key(route):
            continue
        for method in route.methods or ():
            if (method, route.path) in allowed:
                continue
            response = api.client.request(
                method, _placeholder(route.path), json={}, headers=auth(org)
            )
            assert response.status_code == 403, (method, route.path, response.text)
            checked += 1
    assert checked >= 15


def _takes_key(route: APIRoute) -> bool:
    def calls(dependant: Any) -> bool:
        return any(d.call is get_principal or calls(d) for d in dependant.dependencies)

    return calls(route.dependant)


def test_a_revoked_org_key_is_refused_at_once(api: Api) -> None:
    org, _ = _org_key(api)
    assert api.client.get("/v1/budgets?all_tenants=true", headers=auth(org)).status_code == 200
    with session_scope(api.url) as session:
        key = session.scalars(select(ApiKey).where(ApiKey.key_hash == _hash(org))).one()
        from app.services.tenants import revoke_key_by_id

        revoke_key_by_id(session, key.id)
    assert api.client.get("/v1/budgets?all_tenants=true", headers=auth(org)).status_code == 401
