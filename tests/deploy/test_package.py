"""The installable package: build the ``dpsyn`` wheel and the ``dpsyn-client`` wheel it
requires (clients/python), install both with their dependencies into a fresh virtual
environment that cannot see this checkout, check that everything ``app`` and ``workers``
import is declared, and run ``dpsyn serve`` from an empty folder: it must migrate a new
SQLite database (the migrations ship inside the package) and answer ``GET /healthz``.

One module, one owner: ``dpsyn_client`` is the ``dpsyn-client`` distribution's alone, and
dpsyn requires it within one minor version rather than shipping a copy (which a
``pip uninstall dpsyn-client`` broke, and a newer client replaced unseen). The last test
removes the client, puts it back and upgrades it, and dpsyn follows each step.

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
The ``dpsyn-client`` wheel is built here like dpsyn's, never linked from the interpreter
(whose copy may be an editable install of the checkout).
"""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from app.db.migrate import head_revision
from tests.workers.processes import free_port, http_ok, wait_for

ROOT = Path(__file__).resolve().parents[2]
#: What the dpsyn wheel is built from: what the Dockerfile copies for it (no client in it).
SOURCES = ("pyproject.toml", "README.md", "NOTICE", "app", "workers")
CLIENT = ROOT / "clients" / "python"
CLIENT_SOURCES = ("pyproject.toml", "README.md", "dpsyn_client")
#: What dpsyn says when the client is missing (app/__init__.py).
CLIENT_MISSING = "dpsyn requires the dpsyn-client distribution"


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process that must not see the checkout or the test settings."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DPSYN_", "PYTHON", "VIRTUAL_ENV"))
    }
    return {**env, **extra}


def _attempt(
    *command: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = _attempt(*command, cwd=cwd, env=env)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _copy(root: Path, names: Collection[str], target: Path) -> Path:
    """A copy of ``names`` of ``root`` (a stale build/ or egg-info there cannot leak in)."""
    target.mkdir(parents=True)
    for name in names:
        path = root / name
        if path.is_dir():
            shutil.copytree(path, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, target / name)
    return target


def _wheel(source: Path, dist: Path, pattern: str) -> Path:
    """The wheel of ``source``, built without build isolation (fast, offline), its own
    dependencies not fetched."""
    _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", dist, source, cwd=source.parent,
    )  # fmt: skip
    wheels = list(dist.glob(pattern))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _client_version() -> str:
    return tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["version"]


def _next_patch(version: str) -> str:
    major, minor, patch = (*Version(version).release, 0, 0)[:3]
    return f"{major}.{minor}.{patch + 1}"


def _client_wheel(base: Path, version: str | None = None) -> Path:
    """The dpsyn-client wheel of clients/python; with ``version``, of a copy that says it is
    that version (a release an app may upgrade to)."""
    name = f"client-{version or 'checkout'}"
    source = _copy(CLIENT, CLIENT_SOURCES, base / name / "src")
    if version is not None:
        project = source / "pyproject.toml"
        stated = f'version = "{_client_version()}"'
        assert stated in project.read_text()
        project.write_text(project.read_text().replace(stated, f'version = "{version}"', 1))
    return _wheel(source, base / name / "dist", "dpsyn_client-*.whl")


def _requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's metadata (pyproject's dependencies and extras)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []


def _closure(requirements: list[str], provided: Collection[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``requirements`` pull in, transitively, for this
    interpreter (markers evaluated; an extra's requirements only where it is asked for, so
    not dpsyn's own ``dev``), except those named in ``provided`` (built here as wheels). One
    that is not installed is left out: pip then names it."""
    found: dict[str, metadata.Distribution] = {}
    walked: set[tuple[str, str]] = set()
    pending = [(Requirement(line), "") for line in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        if canonicalize_name(requirement.name) in provided:
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


@dataclass(frozen=True)
class Built:
    dpsyn: Path  # the dpsyn wheel
    client: Path  # the dpsyn-client wheel it requires
    site: Path  # the folder that shows their dependencies (see the module's docstring)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    base = tmp_path_factory.mktemp("package")
    dpsyn = _wheel(_copy(ROOT, SOURCES, base / "src"), base / "dist", "dpsyn-*.whl")
    client = _client_wheel(base)
    requirements = _requirements(dpsyn) + _requirements(client)
    _link_site(_closure(requirements, provided={"dpsyn", "dpsyn-client"}), base / "site")
    return Built(dpsyn, client, base / "site")


def _venv(base: Path, site: Path) -> Path:
    """A new venv under ``base`` that sees ``site`` and nothing of this checkout."""
    venv = base / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=base)
    python = venv / "bin" / "python"
    target = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=base
        ).strip()
    )
    (target / "_dpsyn_test_deps.pth").write_text(f"{site}\n")
    return venv


def _pip(venv: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """This interpreter's pip, acting on ``venv`` (which has none of its own)."""
    return _attempt(
        sys.executable, "-m", "pip", "--python", venv / "bin" / "python", *args,
        cwd=venv.parent, env=_clean_env(),
    )  # fmt: skip


def _installed(venv: Path, *wheels: Path) -> None:
    done = _pip(venv, "install", "--no-index", "-q", *wheels)
    assert done.returncode == 0, f"{wheels} did not install:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory) -> Path:
    """A venv with the wheels of this checkout, dpsyn's and the client's, installed together
    (as scripts/setup.sh and the Dockerfile do) with their declared dependencies, and nothing
    else (see the module's docstring); returns the venv folder."""
    venv = _venv(tmp_path_factory.mktemp("installed"), built.site)
    _installed(venv, built.dpsyn, built.client)
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


@contextmanager
def _serving(venv: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``dpsyn serve`` of ``venv``, started in an empty folder and answering ``/healthz``;
    yields (URL, that folder)."""
    work = tmp_path / "work"
    work.mkdir()
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(venv / "bin" / "dpsyn"), "serve", "--port", str(port)],
            cwd=work,
            env=_clean_env(HOME=str(tmp_path / "home")),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"dpsyn serve exited ({process.returncode}):\n{log.read_text()[-4000:]}")
        return http_ok(f"{url}/healthz")

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


@pytest.fixture
def served(installed: Path, tmp_path) -> Iterator[tuple[str, Path]]:
    with _serving(installed, tmp_path) as where:
        yield where


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


#: Run in the venv: who owns dpsyn_client and at which version; with ``--server``, also
#: whether the server's chat rendering (app.services.openai_compat) is that owner's file.
OWNER_PROBE = """
import json, sys
from importlib import metadata
from pathlib import Path
client = metadata.distribution("dpsyn-client")
out = {"owners": metadata.packages_distributions().get("dpsyn_client"), "version": client.version}
if "--server" in sys.argv:
    from app.services import openai_compat
    used = Path(openai_compat.chat_messages.__code__.co_filename).resolve()
    out["server_uses_it"] = used in {Path(client.locate_file(f)).resolve() for f in client.files}
print(json.dumps(out))
"""


def _pip_show(venv: Path, *names: str) -> list[tuple[dict[str, str], list[str]]]:
    """``pip show -f NAMES``: for each, its fields and the files it lists."""
    shown = _pip(venv, "show", "-f", *names)
    assert shown.returncode == 0, shown.stderr
    found = []
    for block in shown.stdout.split("\n---\n"):
        head, _, files = block.partition("\nFiles:\n")
        fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)
        found.append((fields, files.split()))
    return found


def _assert_one_owner(venv: Path, version: str, *probe_args: str) -> dict[str, object]:
    """The client at ``version`` owns dpsyn_client alone, dpsyn requires it, and pip finds
    nothing broken; returns what :data:`OWNER_PROBE` found."""
    (dpsyn, dpsyn_files), (client, client_files) = _pip_show(venv, "dpsyn", "dpsyn-client")
    assert "dpsyn-client" in dpsyn["Requires"].split(", ")
    assert not [f for f in dpsyn_files if f.startswith("dpsyn_client")], dpsyn_files
    assert (client["Version"], client["Required-by"]) == (version, "dpsyn")
    assert "dpsyn_client/chat.py" in client_files
    probe = json.loads(
        _run(venv / "bin" / "python", "-c", OWNER_PROBE, *probe_args, cwd=venv.parent,
             env=_clean_env())
    )  # fmt: skip
    assert (probe["owners"], probe["version"]) == (["dpsyn-client"], version)
    check = _pip(venv, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    return probe


def test_the_client_has_one_owner_and_dpsyn_follows_its_removal_and_upgrade(
    built: Built, tmp_path: Path
) -> None:
    """dpsyn's wheel holds no dpsyn_client and requires the dpsyn-client distribution within
    one minor version. Installed side by side, the client owns the module alone; removed,
    pip and dpsyn name it; put back and upgraded within the range, the server uses the new
    one, starts and serves, and the CLI talks to it through the client."""
    with zipfile.ZipFile(built.dpsyn) as archive:
        assert not [n for n in archive.namelist() if n.startswith("dpsyn_client")]
    (requirement,) = [
        Requirement(line)
        for line in _requirements(built.dpsyn)
        if canonicalize_name(Requirement(line).name) == "dpsyn-client"
    ]
    current, newer = _client_version(), _next_patch(_client_version())
    assert requirement.specifier.contains(current) and requirement.specifier.contains(newer)
    venv = _venv(tmp_path, built.site)
    alone = _pip(venv, "install", "--no-index", built.dpsyn)
    assert alone.returncode != 0 and "dpsyn-client" in alone.stderr, alone.stderr
    _installed(venv, built.dpsyn, built.client)
    _assert_one_owner(venv, current)

    removed = _pip(venv, "uninstall", "--yes", "dpsyn-client")
    assert removed.returncode == 0, removed.stderr
    check = _pip(venv, "check")
    broken = r"^dpsyn \S+ requires dpsyn-client, which is not installed"
    assert check.returncode != 0 and re.search(broken, check.stdout, re.M), check.stdout
    for command in ([venv / "bin" / "python", "-c", "import app.main"], [venv / "bin" / "dpsyn"]):
        refused = _attempt(*command, cwd=tmp_path, env=_clean_env())
        assert refused.returncode != 0 and CLIENT_MISSING in refused.stderr, refused.stderr

    _installed(venv, built.client)
    _assert_one_owner(venv, current)
    _installed(venv, _client_wheel(tmp_path, newer))
    assert _assert_one_owner(venv, newer, "--server")["server_uses_it"] is True
    with _serving(venv, tmp_path) as (url, work):
        key = (work / ".dpsyn" / "admin_key").read_text().strip()
        missing = _attempt(
            venv / "bin" / "dpsyn", "prompts", "get", "0" * 32, "--url", url, "--key", key,
            cwd=work, env=_clean_env(HOME=str(tmp_path / "home")),
        )  # fmt: skip
    assert missing.returncode != 0 and "(not_found, HTTP 404)" in missing.stderr, missing


def test_the_client_docs_state_the_range_dpsyn_requires() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = [r for r in project["dependencies"] if r.startswith("dpsyn-client")]
    assert f"`{requirement}`" in (ROOT / "docs" / "client.md").read_text()
