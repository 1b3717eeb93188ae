"""API replicas must not race on migrations: ``DPSYN_MIGRATE_ON_START=false`` (or
``dpsyn serve --no-migrate``) leaves the schema to a one-shot ``dpsyn migrate``."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect
from typer.testing import CliRunner

from app.cli import app as cli
from app.db.migrate import current_revision, head_revision
from app.db.session import get_engine, session_scope
from app.llm.provider import StaticProvider
from app.main import create_app
from app.services.tenants import authenticate
from app.settings import Settings
from tests.synthesis.fake_backend import FakeBackend

KEY = "deploy-test-bootstrap-key-0123456789abcdef"
runner = CliRunner()


class UnusedQueue:
    """A queue these tests never reach (no job is submitted)."""

    def enqueue(self, job_id: str) -> None:
        raise AssertionError("no job is submitted in these tests")


def _tables(url: str) -> set[str]:
    return set(inspect(get_engine(url)).get_table_names())


def _serve_app(settings: Settings):
    return create_app(settings, queue=UnusedQueue(), backend_provider=StaticProvider(FakeBackend()))


def test_the_setting_is_read_from_the_environment(monkeypatch):
    assert Settings().migrate_on_start is True
    monkeypatch.setenv("DPSYN_MIGRATE_ON_START", "false")
    assert Settings().migrate_on_start is False


def test_an_api_told_not_to_migrate_leaves_the_schema_alone(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    app = _serve_app(Settings(database_url=url, migrate_on_start=False))
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
    assert "alembic_version" not in _tables(url)
    # The default still migrates (the embedded deployment needs no separate step).
    with TestClient(_serve_app(Settings(database_url=url))) as client:
        assert client.get("/healthz").status_code == 200
    assert current_revision(url) == head_revision()


def test_dpsyn_migrate_applies_the_schema_and_the_bootstrap_key_idempotently(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'dpsyn.db'}"
    monkeypatch.setenv("DPSYN_DATABASE_URL", url)
    monkeypatch.setenv("DPSYN_BOOTSTRAP_API_KEY", KEY)
    for _ in range(2):
        result = runner.invoke(cli, ["migrate"])
        assert result.exit_code == 0, result.output
        assert f"at revision {head_revision()}" in result.output
    assert current_revision(url) == head_revision()
    with session_scope(url) as session:
        assert authenticate(session, KEY) is not None


@pytest.mark.parametrize(
    ("args", "env", "migrates"),
    [
        (["serve", "--no-migrate"], {}, False),
        (["serve"], {"DPSYN_MIGRATE_ON_START": "false"}, False),
        (["serve"], {}, True),
    ],
)
def test_dpsyn_serve_follows_the_flag_and_the_setting(tmp_path, monkeypatch, args, env, migrates):
    """``dpsyn serve`` with uvicorn replaced by starting the app's lifespan here: the flag or
    the setting must reach both the command's own preparation and the application."""
    url = f"sqlite:///{tmp_path / 'replica.db'}"
    monkeypatch.setenv("DPSYN_DATABASE_URL", url)
    monkeypatch.setenv("DPSYN_BOOTSTRAP_API_KEY", KEY)
    monkeypatch.delenv("DPSYN_BROKER_URL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if not migrates:  # a replica starts after `dpsyn migrate` created the key's tables
        assert runner.invoke(cli, ["migrate"]).exit_code == 0
        get_engine(url).dispose()
        with get_engine(url).begin() as conn:
            conn.exec_driver_sql("DROP TABLE alembic_version")  # a later upgrade would redo it
    served = []

    def fake_run(app, **_: object) -> None:
        assert gc.get_freeze_count() > 0  # the app's heap is out of the collector's walk
        with TestClient(app) as client:
            served.append(client.get("/healthz").status_code)

    monkeypatch.setattr("uvicorn.run", fake_run)
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert served == [200]
    assert ("alembic_version" in _tables(url)) is migrates


def test_alembic_from_the_checkout_uses_the_packaged_migrations(tmp_path):
    """Developers keep running ``alembic`` from the checkout: alembic.ini points at the
    migrations inside the package."""
    root = Path(__file__).resolve().parents[2]
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    env = {**os.environ, "DPSYN_DATABASE_URL": url, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(root / "alembic.ini"), "upgrade", "head"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert current_revision(url) == head_revision()
