"""Plug-in methods declared as a Python package's entry points (issue 45: plug-ins loaded
only from an environment variable): an installed distribution whose ``entry_points.txt``
names a module under the ``dpsyn.methods`` group is loaded wherever
``DPSYN_METHOD_MODULES`` is, and the methods table generator reads both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.settings import METHOD_ENTRY_POINTS, Settings

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = """
from app.methods.registry import register
from tests.methods.echo import ECHO

register(ECHO)
"""


def _installed_plugin(site: Path) -> None:
    """A distribution as pip installs one: its module and its dist-info with entry points."""
    (site / "echo_ep_plugin.py").write_text(PLUGIN)
    info = site / "echo_ep_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-ep-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{METHOD_ENTRY_POINTS}]\necho = echo_ep_plugin\n")


def _run(site: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_entry_point_is_a_method_module_after_the_setting(tmp_path: Path) -> None:
    _installed_plugin(tmp_path)
    code = "from app.settings import Settings; print(Settings().method_module_names())"
    alone = _run(tmp_path, code, DPSYN_METHOD_MODULES="")
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.strip() == "['echo_ep_plugin']"
    both = _run(tmp_path, code, DPSYN_METHOD_MODULES="json, echo_ep_plugin")
    assert both.stdout.strip() == "['json', 'echo_ep_plugin']"  # each once, the setting first
    assert Settings(method_modules="").method_module_names() == []  # none installed here


def test_the_methods_table_holds_the_plugins(tmp_path: Path) -> None:
    _installed_plugin(tmp_path)
    table = _run(tmp_path, "from app.methods.docs import main; main([])", DPSYN_METHOD_MODULES="")
    assert table.returncode == 0, table.stderr
    assert "`--echo-repeat`" in table.stdout  # the plug-in's parameter has its row
    without = _run(ROOT / "tests", "from app.methods.docs import main; main([])")
    assert "--echo-repeat" not in without.stdout  # the negative control: no plug-in, no row
