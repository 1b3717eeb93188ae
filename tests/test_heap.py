"""Heap freezing in serving processes (app.heap): what ``dpsyn serve`` keeps out of the cycle
collector's reach, and what it leaves to it. The pause it removes is measured in
bench/load.py (bench/README.md); here, what the collector has to walk."""

from __future__ import annotations

import gc
import weakref

import pytest

from app import heap
from app.llm import provider as provider_module
from app.llm.factory import BackendKind


def test_disabled_by_default_nothing_is_frozen():
    heap.freeze_long_lived()
    assert gc.get_freeze_count() == 0


def test_enable_takes_the_live_objects_out_of_the_collectors_walk():
    long_lived = [[index] for index in range(20_000)]  # tracked containers, alive throughout
    tracked_before = len(gc.get_objects())
    heap.enable()
    assert gc.get_freeze_count() >= len(long_lived)
    # What a full collection walks now: only what is made after the freeze.
    assert len(gc.get_objects()) < tracked_before / 10
    made_later = [[index] for index in range(1_000)]
    assert len(gc.get_objects()) >= len(made_later)
    assert all(gc.is_tracked(item) for item in made_later)


def test_garbage_of_the_moment_is_collected_not_frozen():
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    collected = []
    node = Node()
    gc.collect()
    watcher = weakref.ref(node, lambda _: collected.append(True))
    del node  # now garbage, not yet collected
    heap.enable()
    assert collected == [True]
    assert watcher() is None


def test_disable_stops_later_freezes():
    heap.enable()
    frozen = gc.get_freeze_count()
    heap.disable()
    _more = [[index] for index in range(5_000)]
    heap.freeze_long_lived()
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize("enabled", [True, False])
def test_a_loaded_backend_is_frozen_in_a_serving_process(monkeypatch, enabled):
    """The provider freezes after building its backend, so that a model loaded into the API
    process (``/complete``, the in-process worker) does not bring the long pauses back."""
    model = [[index] for index in range(10_000)]  # what a loaded model leaves on the heap
    monkeypatch.setattr(provider_module, "make_backend", lambda *a, **k: model)
    if enabled:
        heap.enable()
        gc.unfreeze()  # start from nothing frozen: only the provider's freeze counts
    provider = provider_module.BackendProvider(BackendKind.TRANSFORMERS, model=None, url=None)
    assert provider.get() is model
    assert (gc.get_freeze_count() >= len(model)) is enabled
