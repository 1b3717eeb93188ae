"""The planner's shipped table (issue 42): choices computed ahead for the shapes that matter,
so that a quote or submission of a never-seen epsilon or label size at those shapes costs a
lookup, not seconds of simulation. The table must be exactly the planner's choices, and
current: a planner changed without recomputing it would be ignored in production (slow, not
wrong), so this fails instead."""

from __future__ import annotations

import json
import math
import random
from unittest import mock

import pytest

import app.privacy.planner as planner
from app.synthesis import planner_table
from app.synthesis.config import SynthesisConfig

REGENERATE = "recompute it: python -m app.synthesis.planner_table (about 40 minutes)"


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
        mock.patch.object(planner, "shipped_choices", dict),
    ):
        planner.choose_at(7, 100, 1.7)  # no table: simulated


def _accepted(field: str) -> tuple[int, int]:
    """The bounds the service accepts for a token-loop job's M or K."""
    bounds = {type(m).__name__: getattr(m, type(m).__name__.lower())
              for m in SynthesisConfig.model_fields[field].metadata}  # fmt: skip
    return int(bounds["Ge"]), int(bounds["Le"])


def test_every_accepted_shape_is_planned_from_the_table_without_simulating() -> None:
    """A quote of any M and K the service accepts is a lookup (docs/service.md, "Shapes off
    the table"): no shape costs seconds of simulation on the request path. The choice is
    the anchor's at the multiplier scaled by M_a / M, clamped to the table's range."""
    (low_M, high_M), (low_K, high_K) = _accepted("M"), _accepted("K")
    table = planner.shipped_choices()
    span = planner_table.buckets()
    Ms = sorted({low_M, 2, 3, 7, 13, 57, 99, 150, high_M})
    Ks = sorted({low_K, 3, 7, 33, 77, 150, 333, 777, high_K})
    with mock.patch.object(planner, "choose", no_simulation):
        for M in Ms:
            for K in Ks:
                anchor = planner.anchor(M, K)
                assert anchor is not None
                M_a, K_a = anchor
                for sigma in (0.01, 0.3, 2.0, 40.0, 5000.0):
                    choice = planner.choose_at(M, K, sigma)
                    grid = math.log(planner.SIGMA_GRID)
                    bucket = round(math.log(sigma) / grid) + round(math.log(M_a / M) / grid)
                    clamped = min(max(bucket, span.start), span.stop - 1)
                    assert choice.sigma == sigma
                    assert choice.candidate == table[(M_a, K_a, clamped)].candidate, (M, K)


def test_every_accepted_k_is_near_an_anchor() -> None:
    low, high = _accepted("K")
    for K in range(low, high + 1):
        _, K_a = planner.anchor(10, K) or (0, 1)
        assert max(K / K_a, K_a / K) <= 1.6, (K, K_a)


def test_a_shape_of_the_table_is_its_own_anchor() -> None:
    for M, K in planner_table.shapes():
        assert planner.anchor(M, K) == (M, K)
        for bucket in (planner_table.buckets().start, 0, 40):
            assert planner.nearest_choice(M, K, bucket) == planner.shipped_choices()[(M, K, bucket)]


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
