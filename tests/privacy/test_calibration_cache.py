"""The calibration cache (issue 23): a remembered calibration is exactly the search's answer,
the key covers every input the search reads, the LRU is bounded, and a shared store is read
and written where the service installs one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

from app.privacy import calibration, calibration_cache
from app.privacy.accounting import Accounting
from app.privacy.calibration import (
    NoiseTarget,
    calibrate_noise,
    calibration_inputs,
    search_noise,
)
from app.privacy.calibration_cache import MemoryCache, calibration_store
from app.privacy.events import to_dict
from app.privacy.params import AdaDPSynParams, Aggregator, TangParams
from app.privacy.synthesis import SynthesisPrivacy
from app.synthesis.config import SynthesisConfig
from app.synthesis.generator import plan_synthesis
from app.synthesis.tasks import BUILTIN_TASKS

TREC = BUILTIN_TASKS["trec"]
PRIVACY = SynthesisPrivacy(params=TangParams(sigma=1.0), M=10, N=2, tmax=12)
ARGS: dict[str, Any] = {
    "label_sizes": {"a": 835, "b": 1200},
    "shots": {"a": 1, "b": 1},
    "target_epsilon": 2.0,
    "delta": 1 / 5452,
}


@pytest.fixture(autouse=True)
def empty_memory() -> Iterator[None]:
    calibration_cache.MEMORY.clear()
    yield
    calibration_cache.MEMORY.clear()


def no_search(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the search ran although the calibration was remembered")


def test_remembered_calibration_equals_the_search() -> None:
    fresh = search_noise(PRIVACY, NoiseTarget(**ARGS))
    first = calibrate_noise(PRIVACY, **ARGS)
    with mock.patch.object(calibration, "search_noise", no_search):
        cached = calibrate_noise(PRIVACY, **ARGS)
    assert first == fresh and cached == fresh  # multiplier, epsilon and the privacy model


def test_a_remembered_answer_that_misses_the_target_is_searched_afresh() -> None:
    """The guarantee never rests on a remembered number: a shared-store row changed to a
    smaller multiplier (or a stale epsilon) is recomputed, found over the target, and the
    search runs again; the answer is the search's."""
    fresh = search_noise(PRIVACY, NoiseTarget(**ARGS))
    inputs = calibration_inputs(PRIVACY, NoiseTarget(**ARGS))
    key = calibration_cache.calibration_key(inputs)
    calibration_cache.MEMORY.put(key, (fresh.multiplier / 2, 0.5))  # too little noise
    assert calibrate_noise(PRIVACY, **ARGS) == fresh
    calibration_cache.MEMORY.put(key, (fresh.multiplier, 0.5))  # a wrong epsilon beside it
    with mock.patch.object(calibration, "search_noise", no_search):
        assert calibrate_noise(PRIVACY, **ARGS) == fresh  # recomputed, not read


@pytest.mark.parametrize("method", [Aggregator.TANG, Aggregator.ADADPSYN])
def test_cached_plan_equals_fresh_plan_event_for_event(method: Aggregator) -> None:
    sizes = {label: 40 + 7 * i for i, label in enumerate(TREC.labels)}
    cfg = SynthesisConfig(method=method, epsilon=3.0, M=5, N=2, tmax=6, shots=4, K=20, seed=3)
    fresh = plan_synthesis(TREC, sizes, cfg)
    assert len(calibration_cache.MEMORY) > 0
    with mock.patch.object(calibration, "search_noise", no_search):
        cached = plan_synthesis(TREC, sizes, cfg)
    assert cached.privacy == fresh.privacy
    assert to_dict(cached.event()) == to_dict(fresh.event())
    assert cached.epsilon() == fresh.epsilon()


def test_key_names_every_argument_of_the_search() -> None:
    searched = {"privacy"} | {field.name for field in dataclasses.fields(NoiseTarget)}
    inputs = calibration_inputs(PRIVACY, NoiseTarget(**ARGS))
    assert searched <= set(inputs)


CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("M", {"privacy": PRIVACY.model_copy(update={"M": 11})}),
    ("N", {"privacy": PRIVACY.model_copy(update={"N": 3})}),
    ("tmax", {"privacy": PRIVACY.model_copy(update={"tmax": 13})}),
    ("accounting", {"privacy": PRIVACY.model_copy(update={"accounting": Accounting.PAPER})}),
    (
        "params",
        {
            "privacy": PRIVACY.model_copy(
                update={"params": AdaDPSynParams(sigma0=15, sigma1=1.0, sigma2=5, T=2)}
            )
        },
    ),
    ("label size", {"label_sizes": {"a": 836, "b": 1200}}),
    ("label name", {"label_sizes": {"a": 835, "c": 1200}, "shots": {"a": 1, "c": 1}}),
    ("shots", {"shots": {"a": 2, "b": 1}}),
    ("epsilon", {"target_epsilon": 2.0000001}),
    ("delta", {"delta": 1 / 5453}),
    ("rel_tol", {"rel_tol": 1e-3}),
    ("max_iter", {"max_iter": 59}),
]


@pytest.mark.parametrize(("name", "change"), CHANGES, ids=[name for name, _ in CHANGES])
def test_changing_any_one_input_misses(name: str, change: dict[str, Any]) -> None:
    del name
    calibrate_noise(PRIVACY, **ARGS)
    changed = {**ARGS, **change}
    privacy = changed.pop("privacy", PRIVACY)
    searches: list[float] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        result = search_noise(*args, **kwargs)
        searches.append(result.multiplier)
        return result

    with mock.patch.object(calibration, "search_noise", counting):
        result = calibrate_noise(privacy, **changed)
        calibrate_noise(PRIVACY, **ARGS)  # the original is still remembered
    assert len(searches) == 1
    assert result == search_noise(privacy, NoiseTarget(**changed))


def test_memory_is_a_bounded_lru() -> None:
    memory = MemoryCache(size=2)
    memory.put("a", (1.0, 1.0))
    memory.put("b", (2.0, 2.0))
    assert memory.get("a") == (1.0, 1.0)  # "a" is now the most recent
    memory.put("c", (3.0, 3.0))
    assert memory.get("b") is None and memory.get("a") == (1.0, 1.0)
    assert len(memory) == 2


class DictStore:
    def __init__(self) -> None:
        self.items: dict[str, tuple[float, float]] = {}
        self.gets = 0

    def get(self, key: str) -> tuple[float, float] | None:
        self.gets += 1
        return self.items.get(key)

    def put(self, key: str, value: tuple[float, float]) -> None:
        self.items[key] = value


def test_shared_store_is_written_and_read_by_another_process() -> None:
    store = DictStore()
    with calibration_store(store):
        fresh = calibrate_noise(PRIVACY, **ARGS)
    assert list(store.items.values()) == [(fresh.multiplier, fresh.epsilon)]
    calibration_cache.MEMORY.clear()  # another process: nothing in its memory
    with calibration_store(store), mock.patch.object(calibration, "search_noise", no_search):
        assert calibrate_noise(PRIVACY, **ARGS) == fresh
        assert calibrate_noise(PRIVACY, **ARGS) == fresh
    assert store.gets == 2  # the second lookup was served from memory
    with mock.patch.object(calibration, "search_noise", no_search):
        assert calibrate_noise(PRIVACY, **ARGS) == fresh  # no store installed: memory


def test_no_store_outside_the_block() -> None:
    store = DictStore()
    with calibration_store(store):
        pass
    calibrate_noise(PRIVACY, **ARGS)
    assert store.items == {} and store.gets == 0
