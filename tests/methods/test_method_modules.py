"""``DPSYN_METHOD_MODULES``: a plug-in method registers in every API and worker process.

A method outside ``app/`` is one module that calls ``register`` as it loads
(``tests/methods/test_plugin_method.py`` shows it running everywhere in one process). A
deployment runs several processes; each imports the modules this setting names at its start,
so the worker runs the methods the API admits, and a module that cannot load stops the process
at start with its name, not at the first job.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.methods.registry import METHODS, import_method_modules, unregister
from app.settings import Settings
from tests.api.conftest import make_api
from tests.cli.live_server import free_port

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = """
from app.methods.registry import register
from tests.methods.echo import ECHO

register(ECHO)
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> Iterator[str]:
    """A module, ``echo_plugin``, on the path: importing it registers the test's Echo."""
    name = f"echo_plugin_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    if "echo" in METHODS:
        unregister("echo")


def test_the_setting_lists_modules_in_order_without_blanks() -> None:
    settings = Settings(method_modules=" a.b , ,c ")
    assert settings.method_module_names() == ["a.b", "c"]
    assert Settings().method_module_names() == []


def test_an_app_imports_the_modules_before_it_documents_its_methods(plugin, sqlite_url) -> None:
    assert "echo" not in METHODS
    for api in make_api(sqlite_url, method_modules=plugin):
        assert "echo" in METHODS
        schema = api.client.get("/openapi.json").json()["components"]["schemas"]
        assert "repeat" in schema["JobParams"]["properties"]


def test_a_module_that_cannot_load_is_named_at_start(plugin, tmp_path) -> None:
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('secret detail')\n")
    for module in ("no_such_plugin", "broken_plugin"):
        with pytest.raises(ValueError, match=f"cannot import '{module}'") as caught:
            import_method_modules([module])
        assert "secret detail" not in str(caught.value)
    sys.modules.pop("broken_plugin", None)


def test_the_worker_process_imports_them_at_start(plugin, tmp_path) -> None:
    """The Celery worker's module, loaded in a fresh interpreter as ``dpsyn worker`` loads it,
    has the plug-in's method registered before it takes a task."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DPSYN_METHOD_MODULES": plugin,
        "DPSYN_DATABASE_URL": f"sqlite:///{tmp_path / 'w.db'}",
    }
    env.pop("DPSYN_BROKER_URL", None)
    code = (
        "import workers.celery_app\n"
        "from app.methods.registry import METHODS\n"
        "print('registered:', sorted(METHODS))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'echo'" in done.stdout


# A plug-in that ends its import by asking the process to stop: the process must still fail
# loudly, naming the module, rather than exit 0 without serving (or, for Ctrl-C, "Aborted!").
STOPPING = {
    "SystemExit": "import sys\nsys.exit(0)\n",
    "KeyboardInterrupt": "raise KeyboardInterrupt('plugin detail')\n",
}


@pytest.mark.parametrize("command", ["serve", "worker"])
@pytest.mark.parametrize("kind", sorted(STOPPING))
def test_a_plugin_that_stops_the_process_at_import_fails_its_start(
    tmp_path, command: str, kind: str
) -> None:
    """The real ``dpsyn serve`` and ``dpsyn worker``: exit non-zero, the module and the
    exception's type on stderr (its message withheld), before the server migrates or binds."""
    module = f"stopping_plugin_{kind.lower()}"
    (tmp_path / f"{module}.py").write_text(STOPPING[kind])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
        DPSYN_METHOD_MODULES=f"app.methods.registry, {module}",
        DPSYN_PORT=str(free_port()),
        DPSYN_BROKER_URL="redis://127.0.0.1:1/0" if command == "worker" else "",
    )
    done = subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, (done.stdout, done.stderr[-2000:])
    assert f"DPSYN_METHOD_MODULES: cannot import '{module}' ({kind})" in done.stderr
    assert "plugin detail" not in done.stderr + done.stdout
    assert "API on" not in done.stderr  # stopped before the banner ...
    assert not (tmp_path / ".dpsyn" / "dpsyn.db").exists()  # ... and before migrating
