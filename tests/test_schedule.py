"""The order pytest-xdist hands modules out in (tests/conftest.py): the long ones first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_module_exists():
    """A renamed or removed module would silently fall back to the end of the run."""
    for name in conftest.LONG_MODULES:
        assert name == "vllm" or (ROOT / name).is_file(), name


def test_long_modules_go_first_in_their_order_and_the_rest_by_size(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    long_a, long_b = conftest.LONG_MODULES[2], conftest.LONG_MODULES[1]
    nodeids = [
        "tests/test_tls.py::one",
        f"{long_a}::a1",
        "tests/test_heap.py::h1",
        "tests/test_heap.py::h2",
        f"{long_a}::a2",
        f"{long_b}::b1",
    ]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]
    config = SimpleNamespace(rootpath=ROOT)
    conftest.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == [
        f"{long_b}::b1",
        f"{long_a}::a1",
        f"{long_a}::a2",
        "tests/test_heap.py::h1",
        "tests/test_heap.py::h2",
        "tests/test_tls.py::one",
    ]
