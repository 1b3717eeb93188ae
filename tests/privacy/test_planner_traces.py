"""The planner against real teachers (issue 33): distributions recorded with the packaged
model on public benchmark sets (``bench/teacher_traces.py``; public data, so recording them
costs nothing). On every recorded job's shape at epsilon 4 the planned aggregator must not
lose to Tang's mean by more than one paired standard error on those real steps."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from app.privacy.adadpsyn import pooled_aggregate_steps
from app.privacy.planner import PlannerShape, calibrated_pair

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from teacher_traces import TRACES, load_traces  # noqa: E402  (bench/ is no package)

REPEATS = 10  # noise draws per recorded step
EPSILON = 4.0


def _traces() -> dict[str, tuple[np.ndarray, dict]]:
    return load_traces(TRACES)


def _shape(shape: dict) -> PlannerShape:
    """The recorded job's shape as it is planned now: its counts come from the dataset's one
    count release (its own ledger line, issue 41), so no release is priced in the job."""
    return PlannerShape(
        M=shape["M"],
        K=shape["K"],
        N=shape["N"],
        tmax=shape["tmax"],
        label_sizes=shape["label_sizes"],
        shots=shape["shots"],
        epsilon=EPSILON,
        delta=shape["delta"],
    )


def test_the_traces_are_real_teacher_distributions_of_public_jobs():
    traces = _traces()
    assert len(traces) >= 6  # several public sets, M and shot counts
    for key, (probs, shape) in traces.items():
        assert probs.ndim == 3 and probs.shape[1:] == (shape["M"], shape["K"]), key
        assert np.all(probs >= 0) and np.allclose(probs.sum(-1), 1.0), key
        assert len(probs) >= 5, key


@pytest.mark.parametrize("key", sorted(_traces()) if TRACES.exists() else [])
def test_the_planned_choice_does_not_lose_on_real_teachers(key: str):
    probs, shape = _traces()[key]
    job = _shape(shape)
    tang, pooled = calibrated_pair(job)
    sets = np.repeat(probs, REPEATS, axis=0)
    clean = sets.mean(1).argmax(-1)
    hits = []
    for params in (tang, pooled):
        rng = np.random.default_rng(7)  # the same noise for both
        released = pooled_aggregate_steps(sets, params, rng).distributions
        hits.append((released.argmax(-1) == clean).astype(float))
    per_step = (hits[1] - hits[0]).reshape(len(probs), REPEATS).mean(1)
    se = per_step.std(ddof=1) / math.sqrt(len(per_step))
    assert per_step.mean() >= -se, (key, per_step.mean(), se)
