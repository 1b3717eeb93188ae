"""The installable package: build a wheel, install it with its dependencies into a fresh
virtual environment that cannot see this checkout, check that everything ``app`` and
``workers`` import is declared, and run ``dpsyn serve`` from an empty folder: it must migrate
a new SQLite database (the migrations ship inside the package) and answer ``GET /healthz``.

How, offline and fast: a real install of the dependencies from an index (torch, transformers,
the Gemma packages: 1.7 GB) took 3 min 24 s here, and fetches from PyPI. Instead, the venv
gets a folder that shows exactly the distributions the wheel's declared requirements pull
in, transitively (markers and extras followed), linked from the interpreter running the
tests (``scripts/setup.sh`` installed them from pyproject.toml): one ``.pth`` line, which,
unlike a site directory, runs none of that folder's ``.pth`` files. pip then installs the
wheel *with* its dependencies and ``--no-index``: it must find every requirement, at a
version that fits, among those already there, or fail, as it would if pyproject.toml
declared something setup.sh had not installed. Nothing else is visible, the checkout's
editable install and the dev tools included, so a module that imports an undeclared
package fails to import; and tests/deploy/declared_imports.py reads every import statement
of the installed files (lazy ones inside functions too) and maps it to its distribution,
which must be one pyproject.toml names itself (one that merely comes along with another, as
safetensors did with transformers before pyproject.toml named it, does not count). What this
does not check is the download from an index, which scripts/setup.sh does on every machine.
"""

from __future__ import annotations

import email
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from app.db.migrate import head_revision
from tests.workers.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "NOTICE", "app", "workers", "clients")


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process that must not see the checkout or the test settings."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DPSYN_", "PYTHON", "VIRTUAL_ENV"))
    }
    return {**env, **extra}


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _build_wheel(base: Path) -> Path:
    """The wheel of a copy of the checkout (a stale build/ of the checkout cannot leak in);
    built without build isolation (fast, offline), its own dependencies not fetched."""
    source = base / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    dist = base / "dist"
    _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", dist, source, cwd=base,
    )  # fmt: skip
    wheels = list(dist.glob("dpsyn-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's metadata (pyproject's dependencies and extras)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``requirements`` pull in, transitively, for this
    interpreter (markers evaluated; an extra's requirements only where it is asked for, so
    not dpsyn's own ``dev``). One that is not installed is left out: pip then names it."""
    found: dict[str, metadata.Distribution] = {}
    walked: set[tuple[str, str]] = set()
    pending = [(Requirement(line), "") for line in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        key = canonicalize_name(requirement.name)
        found[key] = dist
        for wanted in ("", *requirement.extras):
            if (key, wanted) not in walked:
                walked.add((key, wanted))
                pending += [(Requirement(line), wanted) for line in dist.requires or []]
    return list(found.values())


def _link_site(dists: list[metadata.Distribution], site: Path) -> None:
    """A folder that shows only ``dists``: a link to each top-level file and folder of each
    (its modules and its .dist-info, as its RECORD lists them)."""
    site.mkdir()
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        tops = {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")}
        for top in sorted(tops):
            if not os.path.lexists(site / top):
                (site / top).symlink_to(base / top)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the wheel of this checkout installed with its declared dependencies, and
    nothing else (see the module's docstring); returns the venv folder."""
    base = tmp_path_factory.mktemp("package")
    wheel = _build_wheel(base)
    _link_site(_closure(_requirements(wheel)), base / "site")
    venv = base / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=base)
    python = venv / "bin" / "python"
    target = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=base
        ).strip()
    )
    (target / "_dpsyn_test_deps.pth").write_text(f"{base / 'site'}\n")
    _run(
        sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "-q",
        wheel, cwd=base, env=_clean_env(),
    )  # fmt: skip
    return venv


def test_app_and_workers_import_only_declared_dependencies(installed: Path, tmp_path):
    """Every import of the installed app/ and workers/ is of the standard library, of
    themselves or of a distribution pyproject.toml declares; and every module imports in
    the venv that holds the declared dependencies alone."""
    python = installed / "bin" / "python"
    report = json.loads(
        _run(python, ROOT / "tests/deploy/declared_imports.py", cwd=tmp_path, env=_clean_env())
    )
    assert report["undeclared"] == {}, "imported but not in pyproject.toml's dependencies"
    assert report["failed"] == {}, "modules that do not import with the declared dependencies"


def test_the_installed_package_is_the_wheel_with_its_migrations(installed: Path, tmp_path):
    python = installed / "bin" / "python"
    where = _run(
        python, "-c",
        "import app, app.db.migrate as m; print(app.__file__); print(m.MIGRATIONS)",
        cwd=tmp_path, env=_clean_env(),
    ).split()  # fmt: skip
    assert Path(where[0]).is_relative_to(installed), where
    versions = sorted(p.name for p in (Path(where[1]) / "versions").glob("0*.py"))
    shipped = sorted(p.name for p in (ROOT / "app/db/migrations/versions").glob("0*.py"))
    assert versions == shipped and versions
    assert (installed / "bin" / "dpsyn").exists()


@pytest.fixture
def served(installed: Path, tmp_path) -> Iterator[tuple[str, Path]]:
    """``dpsyn serve`` of the venv, started in an empty folder; yields (URL, that folder)."""
    work = tmp_path / "work"
    work.mkdir()
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(installed / "bin" / "dpsyn"), "serve", "--port", str(port)],
            cwd=work,
            env=_clean_env(HOME=str(tmp_path / "home")),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"dpsyn serve exited ({process.returncode}):\n{log.read_text()[-4000:]}")
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(answers, 90, "the installed dpsyn serve to answer /healthz", log)
        yield url, work
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_installed_dpsyn_serve_migrates_a_fresh_database_and_answers_healthz(served):
    url, work = served
    health = httpx.get(f"{url}/healthz", timeout=5)
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    database = work / ".dpsyn" / "dpsyn.db"
    with sqlite3.connect(database) as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert revision == head_revision()
    assert (work / ".dpsyn" / "admin_key").read_text().startswith("dpsyn_")
    # The wheel ships the dashboard's templates and static files; the cookie-signing key is
    # kept beside the admin key, private.
    login = httpx.get(f"{url}/ui/login", timeout=5)
    assert login.status_code == 200 and 'name="api_key"' in login.text
    for asset in ("dashboard.js", "dashboard.css"):
        assert httpx.get(f"{url}/ui/static/{asset}", timeout=5).status_code == 200, asset
    secret = work / ".dpsyn" / "ui_secret"
    assert len(secret.read_text().strip()) >= 32 and secret.stat().st_mode & 0o077 == 0
    # The schemas' descriptions are the docstrings under their fields (app.documented),
    # which pydantic reads from the installed sources.
    schema = httpx.get(f"{url}/openapi.json", timeout=10).json()
    epsilon = schema["components"]["schemas"]["JobCreate"]["properties"]["epsilon"]
    assert epsilon.get("description") == "Target epsilon of this job; noise is calibrated to it."


def test_installed_dpsyn_migrate_and_worker_run_outside_the_checkout(installed: Path, tmp_path):
    """``dpsyn migrate`` builds the schema and ``dpsyn worker`` connects to its broker and
    reports ready, both from the venv, in a folder that holds nothing of the checkout."""
    from tests.workers.processes import OwnRedis

    redis = OwnRedis()
    work = tmp_path / "work"
    work.mkdir()
    env = _clean_env(
        HOME=str(tmp_path / "home"),
        DPSYN_DATABASE_URL=f"sqlite:///{work / 'dpsyn.db'}",
        DPSYN_BROKER_URL=redis.url,
    )
    dpsyn = installed / "bin" / "dpsyn"
    log = tmp_path / "worker.log"
    process = None
    try:
        migrated = subprocess.run(
            [dpsyn, "migrate"], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )
        assert migrated.returncode == 0, migrated.stderr
        assert f"at revision {head_revision()}" in migrated.stderr
        with log.open("w") as out:
            process = subprocess.Popen(
                [dpsyn, "worker", "--hostname", "wheel@%h"],
                cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def ready() -> bool:
            if process.poll() is not None:
                pytest.fail(f"dpsyn worker exited ({process.returncode}):\n{log.read_text()}")
            return "ready." in log.read_text()

        wait_for(ready, 60, "the installed dpsyn worker to be ready", log)
        assert "wheel@" in log.read_text()
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        redis.close()
