"""Issues 32 and 41 for PromptDPSGD: what a job writes depends on one record only through DP
outputs.

D, D minus one record and D with one record relabelled, same seed, planned from the same
count release: every field of the job's record, its plan, event, stats, settings and CLI
``--out`` is identical. The release is fixed (built once and handed to all three) because
it is the dataset's one DP release of its counts (issue 41), the only mechanism that reads
the count, whose value may differ between neighbours; the plan reads the count through it
only. Excepted, by name: the soft prompt (a DP output: its embeddings' hash). The job row
keeps no exact count (the worker checks the dataset against its own row)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from app.methods.base import MethodPlan, plan_local
from app.methods.registry import Counts, MethodKind, configure, get_method
from app.privacy.accounting import Accounting
from app.privacy.unit import DEFAULT_DELTA, release_counts
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


def test_neighbouring_datasets_write_the_same_job_but_for_its_dp_outputs():
    exact = {name: partition_sizes(SST2, data) for name, data in neighbours().items()}
    assert len({str(sizes) for sizes in exact.values()}) == 3  # the exact counts do differ
    release = release_counts(exact["D"], 0.2, 5e-8, np.random.default_rng(7), "release-d")
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
        plan = METHOD.plan(SST2, config, Counts.released(release))
        seen[name] = written(plan, plan.run(data, backend, None))
    first = seen["D"]
    assert first["out"]["event"].get("count_release") is None  # charged apart, once
    assert first["row"]["config"]["count_release"] == "release-d"
    assert first["out"]["plan"]["planned_records"] == sum(release.estimates().values())
    for name in ("D minus one", "D relabelled"):
        assert seen[name] == first, name


@pytest.mark.parametrize("n", [40, 39])
def test_no_written_field_holds_the_exact_count_or_one_over_it(n):
    """A local run (no service: ``dpsyn synthesize``, ``dpsyn eval``) draws its own release
    from the exact count, at a share of its target: the delta is the public default, and no
    field of the plan is the count (but the released estimate, which rounds to n itself now
    and then)."""
    config = configure(
        METHOD,
        SST2,
        epsilon=4.0,
        delta=None,
        shots=4,
        accounting=Accounting.TIGHT,
        params=PARAMS,
    )
    sizes = {"negative": n // 2, "positive": n - n // 2}
    local = plan_local(METHOD, SST2, config, sizes, declared_public=False)
    assert local.release is not None and local.delta() == pytest.approx(DEFAULT_DELTA)
    assert local.plan.delta != pytest.approx(1 / n)
    fields = local.plan.plan.to_dict()
    released = fields.pop("planned_records")
    assert released == sum(local.release.estimates().values())
    assert fields["count_release"] is None  # a local release is on no ledger
    assert "n_private" not in fields and n not in fields.values()
    assert local.epsilon() <= 4.0
