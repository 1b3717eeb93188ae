"""Client commands from any folder: the URL and key come from ``--url``/``--key`` or
``DPSYN_URL``/``DPSYN_API_KEY``, else from ``./.dpsyn/`` (``url`` and ``admin_key``, written by
``dpsyn serve``), else from the user's ``~/.config/dpsyn/config.toml`` (``dpsyn config set``).

A live API (uvicorn in a thread, in-process worker, fake backend) answers; the checks are on
what the commands print, so a wrong URL or key fails them."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app as cli
from app.cli.serve import write_client_url
from tests.cli.live_server import serving_with_worker
from tests.synthesis.fake_backend import FakeBackend
from tests.workers.processes import free_port

KEY = "client-config-test-admin-key-0123456789abcdef"
runner = CliRunner()


@pytest.fixture
def server(sqlite_url) -> Iterator[str]:
    with serving_with_worker(sqlite_url, FakeBackend(), KEY) as url:
        yield url


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh HOME and working folder, and none of the client's variables set."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "anywhere"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "DPSYN_URL", "DPSYN_API_KEY", "DPSYN_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(work)
    return home


def _list(*extra: str):
    return runner.invoke(cli, ["datasets", "list", "--json", *extra])


def test_the_user_config_makes_client_commands_work_from_any_folder(server, home):
    assert _list().exit_code == 2  # nothing configured: no key
    saved = runner.invoke(cli, ["config", "set", "--url", server, "--key", KEY])
    assert saved.exit_code == 0, saved.output
    path = home / ".config" / "dpsyn" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    listed = _list()
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.strip() == "[]"
    shown = runner.invoke(cli, ["config", "show"])
    assert server in shown.stdout and KEY not in shown.output  # the key is masked


def test_xdg_config_home_is_honoured(server, home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert runner.invoke(cli, ["config", "set", "--url", server, "--key", KEY]).exit_code == 0
    assert (tmp_path / "xdg" / "dpsyn" / "config.toml").exists()
    assert _list().exit_code == 0


def test_a_key_file_or_stdin_keeps_the_key_off_the_command_line(server, home, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    saved = runner.invoke(cli, ["config", "set", "--url", server, "--key-file", str(key_file)])
    assert saved.exit_code == 0, saved.output
    assert _list().exit_code == 0
    again = runner.invoke(cli, ["config", "set", "--url", server, "--key-file", "-"], input=KEY)
    assert again.exit_code == 0 and _list().exit_code == 0


def test_flags_and_environment_win_over_the_config(server, home, monkeypatch):
    unused = f"http://127.0.0.1:{free_port()}"
    assert runner.invoke(cli, ["config", "set", "--url", unused, "--key", KEY]).exit_code == 0
    unreachable = _list()
    assert unreachable.exit_code == 1 and unused in unreachable.output
    assert _list("--url", server).exit_code == 0
    monkeypatch.setenv("DPSYN_URL", server)
    assert _list().exit_code == 0
    wrong = _list("--key", "wrong")
    assert wrong.exit_code == 1 and "401" in wrong.output


def test_the_folder_dpsyn_serve_ran_in_wins_with_its_port(server, home, tmp_path):
    """``dpsyn serve --port N`` saves its URL beside the admin key; the client pairs them."""
    elsewhere = f"http://127.0.0.1:{free_port()}"
    assert (
        runner.invoke(cli, ["config", "set", "--url", elsewhere, "--key", "other"]).exit_code == 0
    )
    state = Path(".dpsyn")
    state.mkdir()
    (state / "admin_key").write_text(KEY + "\n")
    port = int(server.rsplit(":", 1)[1])
    write_client_url(state, "0.0.0.0", port)  # a wildcard bind is reached on loopback
    assert (state / "url").read_text().strip() == server
    listed = _list()
    assert listed.exit_code == 0, listed.output


def test_a_bad_config_file_is_a_clear_error(home):
    path = home / ".config" / "dpsyn" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text("url = [unclosed\n")
    result = _list()
    assert result.exit_code == 2 and str(path) in result.output
