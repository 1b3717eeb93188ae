"""Issue 32 for PromptDPSGD: what a job writes depends on one record only through DP outputs.

D, D minus one record and D with one record relabelled, same seed: with the count release
patched to give the same value for all three (it is the one mechanism that reads the count),
every field of the job's record, its plan, event, stats, settings and CLI ``--out`` is
identical. Excepted, by name: the soft prompt (a DP output: its embeddings' hash), and the
exact record count that the job row keeps for the worker's check of the data
(``config.sizes.private``), which no API body, prompt, result or ``--out`` holds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.methods.base import MethodPlan
from app.methods.registry import Counts, MethodKind, configure, get_method
from app.privacy.accounting import Accounting
from app.promptdpsgd import plan as plan_module
from app.promptdpsgd.train import freeze
from app.results import SynthesisResult
from app.synthesis.generator import partition_sizes
from app.synthesis.tasks import BUILTIN_TASKS
from tests.methods.neighbours import stored_row
from tests.promptdpsgd.test_train import records
from tests.promptdpsgd.tiny import tiny_backend

SST2 = BUILTIN_TASKS["sst2"]
METHOD = get_method(MethodKind.PROMPTDPSGD)
PARAMS = {"steps": 2, "batch_size": 4, "prompt_length": 2}


def neighbours() -> dict[str, list]:
    base = records(40)
    other = {"negative": "positive", "positive": "negative"}[base[0].label]
    return {
        "D": base,
        "D minus one": base[1:],
        "D relabelled": [dataclasses.replace(base[0], label=other), *base[1:]],
    }


def written(plan: MethodPlan, result: SynthesisResult) -> dict[str, Any]:
    """Everything the job writes anywhere, less the named exceptions."""
    stored = plan.stored()
    out = result.to_dict()
    del out["soft_prompt"]  # a DP output (its hash differs with the data)
    assert "seconds" not in out["stats"]  # wall time follows the records' lengths
    return {
        "row": stored_row(plan),
        "api": {
            "summary": METHOD.summary(stored),
            "settings": METHOD.settings(stored),
            "public_stats": METHOD.public_stats(result),
            "stats_summary": METHOD.stats_summary(result.stats),
            "progress_done": METHOD.progress_done(result, plan.progress_total),
            "progress_note": METHOD.progress_note(
                result.stats, plan.progress_total, plan.progress_total
            ),
        },
        "out": out,
        "report": METHOD.report(result),
    }


def test_neighbouring_datasets_write_the_same_job_but_for_its_dp_outputs(monkeypatch):
    released: list[dict[str, int]] = []

    def same_release(sizes, sigma, rng):
        released.append(dict(sizes))
        rng.normal(0.0, sigma, size=len(sizes))  # the same draws as the real release
        return {key: 37 for key in sizes}

    monkeypatch.setattr(plan_module, "release_counts", same_release)
    backend = tiny_backend()
    freeze(backend)
    seen = {}
    for name, data in neighbours().items():
        config = METHOD.configure(
            SST2,
            epsilon=4.0,
            delta=None,
            shots=4,
            accounting=Accounting.TIGHT,
            params=PARAMS,
            seed=11,
        )
        counts = Counts(partition_sizes(SST2, data), len(data))
        plan = METHOD.plan(SST2, config, counts)
        seen[name] = written(plan, plan.run(data, backend, None))
    # the release read the exact count, which did differ (relabelling keeps it)
    assert released == [{"records": 40}, {"records": 39}, {"records": 40}]
    first = seen["D"]
    assert first["out"]["event"]["count_release"]["type"] == "gaussian"
    for name in ("D minus one", "D relabelled"):
        assert seen[name] == first, name


@pytest.mark.parametrize("n", [40, 39])
def test_no_written_field_holds_the_exact_count_or_one_over_it(n):
    """Without the patch: the delta is the public default and no plan field is the count."""
    config = configure(
        METHOD,
        SST2,
        epsilon=4.0,
        delta=None,
        shots=4,
        accounting=Accounting.TIGHT,
        params=PARAMS,
    )
    plan = METHOD.plan(SST2, config, Counts({}, n))
    assert plan.delta != pytest.approx(1 / n)
    fields = plan.plan.to_dict()
    # planned_records is the DP release, which rounds to n itself now and then (about 2% at
    # multiplier 19: it failed a run once); no other field may be n.
    released = fields.pop("planned_records")
    assert isinstance(released, int) and plan.plan.count_sigma is not None
    assert "n_private" not in fields and n not in fields.values()
