"""``dpsyn admin``: tenants and keys on the configured database, no server needed.

Each command is checked by what it leaves in the database and by what a key then opens
through the real API (``create_app`` on the same SQLite file)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app as cli
from app.db.migrate import head_revision, upgrade
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.main import create_app
from app.services.tenants import authenticate
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend

runner = CliRunner()


class UnusedQueue:
    def enqueue(self, job_id: str) -> None:
        raise AssertionError("no job is submitted here")


@pytest.fixture
def admin(sqlite_url, monkeypatch):
    """Run ``dpsyn admin ...`` on the test's database; returns the result."""
    monkeypatch.setenv("DPSYN_DATABASE_URL", sqlite_url)

    def run(*args: str):
        return runner.invoke(cli, ["admin", *args])

    return run


@pytest.fixture
def api(sqlite_url):
    app = create_app(
        Settings(database_url=sqlite_url),
        queue=UnusedQueue(),
        backend_provider=StaticProvider(FakeBackend()),
    )
    with TestClient(app) as client:
        yield client


def _get(api: TestClient, key: str, path: str = "/v1/datasets") -> int:
    return api.get(path, headers={"Authorization": f"Bearer {key}"}).status_code


def test_create_prints_the_key_once_and_it_opens_the_api(admin, api, sqlite_url):
    created = admin("tenants", "create", "acme")
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert key.startswith("dpsyn_") and "\n" not in key
    assert "acme" in created.stderr and "shown once" in created.stderr
    assert _get(api, key) == 200
    listed = admin("tenants", "list", "--json")
    rows = json.loads(listed.stdout)
    assert [(row["name"], row["disabled"], row["live_keys"]) for row in rows] == [
        ("acme", False, 1)
    ]
    assert key not in listed.output  # only hashes are stored; never shown again
    with session_scope(sqlite_url) as session:
        assert authenticate(session, key).tenant_id == rows[0]["id"]


def test_a_duplicate_name_is_refused_and_nothing_changes(admin):
    assert admin("tenants", "create", "acme").exit_code == 0
    again = admin("tenants", "create", "acme")
    assert again.exit_code == 1
    assert "a tenant named 'acme' already exists" in again.stderr
    assert len(json.loads(admin("tenants", "list", "--json").stdout)) == 1


def test_disable_locks_out_every_key_of_the_tenant_and_enable_restores_them(admin, api):
    first = admin("tenants", "create", "acme").stdout.strip()
    second = admin("keys", "create", "acme", "--scope", "prompts:read").stdout.strip()
    other = admin("tenants", "create", "other").stdout.strip()
    assert _get(api, first) == 200 and _get(api, second, "/v1/prompts") == 200
    disabled = admin("tenants", "disable", "acme")
    assert disabled.exit_code == 0, disabled.output
    assert _get(api, first) == 401 and _get(api, second, "/v1/prompts") == 401
    assert _get(api, other) == 200  # other tenants are untouched
    rows = {row["name"]: row for row in json.loads(admin("tenants", "list", "--json").stdout)}
    assert rows["acme"]["disabled"] and not rows["other"]["disabled"]
    refused = admin("keys", "create", "acme")
    assert refused.exit_code == 1 and "disabled" in refused.stderr
    assert admin("tenants", "enable", "acme").exit_code == 0
    assert _get(api, first) == 200


def test_keys_create_list_and_revoke(admin, api):
    admin("tenants", "create", "acme")
    created = admin("keys", "create", "acme", "--scope", "prompts:read", "--json")
    assert created.exit_code == 0, created.output
    body = json.loads(created.stdout)
    assert body["scope"] == "prompts:read" and body["key"].startswith("dpsyn_")
    assert _get(api, body["key"], "/v1/prompts") == 200
    assert _get(api, body["key"]) == 403  # a read key cannot manage datasets
    listed = json.loads(admin("keys", "list", "acme", "--json").stdout)
    assert {row["id"]: row["revoked"] for row in listed} == {
        row["id"]: False for row in listed
    } and body["id"] in {row["id"] for row in listed}
    revoked = admin("keys", "revoke", body["id"])
    assert revoked.exit_code == 0, revoked.output
    assert _get(api, body["key"], "/v1/prompts") == 401
    listed = {
        row["id"]: row["revoked"]
        for row in json.loads(admin("keys", "list", "acme", "--json").stdout)
    }
    assert listed[body["id"]] is True and list(listed.values()).count(False) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tenants", "disable", "nobody"], "no tenant named or with ID 'nobody'"),
        (["keys", "create", "nobody"], "no tenant named or with ID 'nobody'"),
        (["keys", "revoke", "0123"], "no API key with ID '0123'"),
        (["keys", "create", "acme", "--scope", "root"], "root"),
    ],
)
def test_unknown_names_and_ids_are_clear_errors(admin, args, message):
    admin("tenants", "create", "acme")
    result = admin(*args)
    assert result.exit_code in (1, 2)
    assert message in result.output


def test_an_unmigrated_or_missing_database_is_refused_without_creating_it(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere.db"
    monkeypatch.setenv("DPSYN_DATABASE_URL", f"sqlite:///{missing}")
    result = runner.invoke(cli, ["admin", "tenants", "list"])
    assert result.exit_code == 2 and "dpsyn migrate" in result.output
    assert not missing.exists()
    old = tmp_path / "old.db"
    old.touch()
    monkeypatch.setenv("DPSYN_DATABASE_URL", f"sqlite:///{old}")
    result = runner.invoke(cli, ["admin", "tenants", "list"])
    assert result.exit_code == 2
    assert f"expects {head_revision()}" in result.output and "dpsyn migrate" in result.output


def test_the_embedded_database_is_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPSYN_DATABASE_URL", raising=False)
    (tmp_path / ".dpsyn").mkdir()
    upgrade(f"sqlite:///{tmp_path / '.dpsyn' / 'dpsyn.db'}")
    assert runner.invoke(cli, ["admin", "tenants", "create", "local"]).exit_code == 0
    listed = runner.invoke(cli, ["admin", "tenants", "list"])
    assert listed.exit_code == 0 and "local" in listed.stdout


def test_the_operator_creates_a_named_org_key_that_reads_every_tenant(admin, api):
    """``--scope org:read --name``: the only way to an org key (issue 34); it reads all
    tenants' budgets and nothing of any tenant's data; names show in ``keys list``."""
    admin("tenants", "create", "acme")
    admin("tenants", "create", "ops")
    created = admin("keys", "create", "ops", "--scope", "org:read", "--name", " finance ", "--json")
    assert created.exit_code == 0, created.output
    body = json.loads(created.stdout)
    assert (body["scope"], body["name"], body["last_used_at"]) == ("org:read", "finance", None)
    assert _get(api, body["key"], "/v1/budgets?all_tenants=true") == 200
    assert _get(api, body["key"], "/v1/datasets") == 403
    listed = admin("keys", "list", "ops")
    assert listed.stdout.splitlines()[0].split()[:3] == ["ID", "NAME", "SCOPE"]
    assert f"{body['id']}  finance  org:read" in listed.stdout
    used = json.loads(admin("keys", "list", "ops", "--json").stdout)
    assert next(r for r in used if r["id"] == body["id"])["name"] == "finance"
    refused = admin("keys", "create", "ops", "--name", "tab\there")
    assert refused.exit_code == 1 and "name" in refused.output and "printable" in refused.output
