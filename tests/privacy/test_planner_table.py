"""The planner's shipped table (issue 42): choices computed ahead for the shapes that matter,
so that a quote or submission of a never-seen epsilon or label size at those shapes costs a
lookup, not seconds of simulation. The table must be exactly the planner's choices, and
current: a planner changed without recomputing it would be ignored in production (slow, not
wrong), so this fails instead."""

from __future__ import annotations

import json
import random
from unittest import mock

import pytest

import app.privacy.planner as planner
from app.synthesis import planner_table

REGENERATE = "recompute it: python -m app.synthesis.planner_table (about 4 minutes)"


@pytest.fixture(scope="module")
def document() -> dict:
    return json.loads(planner.TABLE.read_text())


def test_the_table_was_computed_by_this_planner(document: dict) -> None:
    assert document["fingerprint"] == planner.fingerprint(), REGENERATE


def test_the_table_covers_every_shape_that_matters_over_the_whole_range(document: dict) -> None:
    covered = {(s["M"], s["K"]): s for s in document["shapes"]}
    assert set(planner_table.shapes()) <= set(covered), REGENERATE
    span = planner_table.buckets()
    for shape in covered.values():
        assert shape["first_bucket"] == span.start and len(shape["choices"]) == len(span)
    assert len(planner.shipped_choices()) == len(covered) * len(span)


@pytest.mark.parametrize("M,K", [(6, 50), (10, 100)])
def test_sampled_entries_are_exactly_what_the_planner_chooses(M: int, K: int) -> None:
    buckets = random.Random(f"{M},{K}").sample(list(planner_table.buckets()), 2)
    computed = planner.choose_many(M, K, buckets)
    for bucket in buckets:
        assert planner.shipped_choices()[(M, K, bucket)] == computed[bucket], (M, K, bucket)


def no_simulation(*args: object) -> None:
    raise AssertionError("the planner simulated a shape the table holds")


def test_a_shape_in_the_table_is_planned_without_simulating() -> None:
    with mock.patch.object(planner, "choose", no_simulation):
        for sigma in (0.31, 1.7, 12.0):
            choice = planner.choose_at(20, 100, sigma)
            assert choice.sigma == sigma
    with (
        pytest.raises(AssertionError, match="simulated"),
        mock.patch.object(planner, "choose", no_simulation),
    ):
        planner.choose_at(7, 100, 1.7)  # not a shape that matters: simulated


def test_a_table_of_another_planner_is_ignored(tmp_path, document: dict) -> None:
    stale = tmp_path / "planner_table.json"
    stale.write_text(json.dumps({**document, "fingerprint": "0" * 64}))
    planner.shipped_choices.cache_clear()
    try:
        with mock.patch.object(planner, "TABLE", stale):
            assert planner.shipped_choices() == {}
        with mock.patch.object(planner, "TABLE", tmp_path / "missing.json"):
            planner.shipped_choices.cache_clear()
            assert planner.shipped_choices() == {}
    finally:
        planner.shipped_choices.cache_clear()
