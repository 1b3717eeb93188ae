"""``dpsyn-worker-health``: the workers' container healthcheck, without the command line.

Compose checks every worker container every 30 s. ``dpsyn worker-health`` first imports the
whole CLI (typer, rich, pydantic-settings, scipy and dp_accounting through the privacy
commands): 1.7-2 s of CPU per check, taken from the cores the worker's job runs on. The
console script ``dpsyn-worker-health`` imports the standard library only and answers alike;
``tests/workers/test_worker_health.py`` runs both against a real worker through a job.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "dpsyn-worker-health"
#: What the check must not load: the CLI and everything heavy behind it.
HEAVY = (
    "app.cli", "app.settings", "typer", "rich", "click", "pydantic", "pydantic_settings",
    "scipy", "numpy", "dp_accounting", "torch", "transformers", "sqlalchemy", "celery",
)  # fmt: skip
PROBE = """
import json, sys
from app.worker_health import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def _env(alive: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env["PYTHONPATH"] = str(ROOT)
    if alive is not None:
        env["DPSYN_WORKER_ALIVE_FILE"] = str(alive)
    return env


def _script() -> Path:
    path = Path(sys.executable).parent / SCRIPT
    assert path.exists(), f"{path} is missing: `pip install -e .` (scripts/setup.sh) installs it"
    return path


def _run(command: list[str], alive: Path | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=_env(alive), cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_compose_runs_the_console_script_the_package_declares():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    test = compose["x-worker"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", SCRIPT], test
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[SCRIPT] == "app.worker_health:main"
    assert scripts["dpsyn"] == "app.cli:main"  # `dpsyn worker-health` stays


def test_the_check_loads_neither_the_cli_nor_anything_heavy(tmp_path):
    alive = tmp_path / "alive"
    alive.touch()
    probe = PROBE.replace("HEAVY", repr(HEAVY))
    done = _run([sys.executable, "-c", probe, "--max-age", "90"], alive)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}, done.stderr
    assert done.stdout.startswith("alive (")


def test_the_console_script_answers_in_milliseconds_of_cpu(tmp_path):
    alive = tmp_path / "alive"
    alive.touch()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = _run([str(_script()), "--max-age", "90"], alive)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr
    assert cpu_s < 0.5, f"{cpu_s:.2f} s of CPU"  # the CLI took 1.7-2 s


@pytest.mark.parametrize("case", ["missing", "stale", "unset"])
def test_the_console_script_fails_for_a_missing_stale_or_unset_alive_file(tmp_path, case):
    alive = tmp_path / "alive"
    if case == "stale":
        alive.touch()
        old = time.time() - 120
        os.utime(alive, (old, old))
    done = _run([str(_script()), "--max-age", "90"], None if case == "unset" else alive)
    assert done.returncode == 1, done.stdout + done.stderr
    expected = {
        "missing": "does not exist",
        "stale": "it is stuck or has lost its database",
        "unset": "needs DPSYN_WORKER_ALIVE_FILE",
    }[case]
    assert expected in done.stderr and done.stderr.startswith("error: ")
    assert _run([str(_script()), "--max-age", "0"], alive).returncode == 2  # a wrong option


def test_dpsyn_worker_health_still_answers_and_alike(tmp_path, monkeypatch):
    from app.cli import app as cli

    alive = tmp_path / "alive"
    monkeypatch.setenv("DPSYN_WORKER_ALIVE_FILE", str(alive))
    missing = CliRunner().invoke(cli, ["worker-health", "--max-age", "90"])
    script = _run([str(_script()), "--max-age", "90"], alive)
    assert missing.exit_code == 2 and "does not exist" in missing.output
    assert " ".join(missing.output.split()) == " ".join(script.stderr.split())  # one message
    alive.touch()
    fresh = CliRunner().invoke(cli, ["worker-health", "--max-age", "90"])
    age = re.search(r"alive \((\d+) s ago\)", fresh.output)  # seconds: a loaded machine
    assert fresh.exit_code == 0 and age and int(age.group(1)) <= 5, fresh.output
