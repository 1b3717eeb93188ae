"""Issues 32 and 41 for PromptPATE: what a job writes depends on one record only through DP
outputs.

D, D minus one record and D with one record relabelled, same seed: nothing a PromptPATE job
plans reads the private count (``reads_counts`` is False: its plan is given no counts, and
a job of it causes no count release), so every field of the job's record, its plan, event,
stats, settings and CLI ``--out`` is identical. Excepted, by name, are the DP outputs: the
student prompt and its demonstrations, and the counts that follow from the noisy threshold
checks (``processed``, ``answered``, ``rejected``, ``budget_exhausted``, ``spent_mu``,
``pool``, ``holdout``, ``holdout_accuracy``: functions of which queries passed
Confident-GNMax, i.e. post-processing of DP outputs, and of the public inputs). The job row
keeps no exact record count (``config.sizes.private`` is the declared-public count, else 0:
the worker checks the dataset against its own row)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from app.methods.base import MethodPlan
from app.methods.registry import Counts, CountsMode, MethodKind, get_method
from app.pate.config import PateError
from app.privacy.accounting import Accounting
from app.privacy.unit import DEFAULT_DELTA
from app.results import SynthesisResult
from app.synthesis.generator import partition_sizes
from tests.methods.neighbours import stored_row
from tests.pate.fake_backend import PateFakeBackend
from tests.pate.helpers import SST2, private_records, public_inputs

METHOD = get_method(MethodKind.PROMPTPATE)
PUBLIC = public_inputs(good=12, bad=12, mixed=12)
PARAMS = {"teachers": 40, "threshold_fraction": 0.8, "candidates": 4, "group_size": 8}
DP_STATS = (
    "processed",
    "answered",
    "rejected",
    "budget_exhausted",
    "spent_mu",
    "pool",
    "holdout",
    "holdout_accuracy",
)


def neighbours() -> dict[str, list]:
    base = private_records(400)
    other = {"negative": "positive", "positive": "negative"}[base[0].label]
    return {
        "D": base,
        "D minus one": base[1:],
        "D relabelled": [dataclasses.replace(base[0], label=other), *base[1:]],
    }


def plan_for(data: list, accounting=Accounting.TIGHT, **params: object) -> MethodPlan:
    config = METHOD.configure(
        SST2,
        epsilon=12.0,
        delta=None,
        shots=2,
        accounting=accounting,
        params={**PARAMS, **params},
        seed=3,
    )
    # as the service hands a method that reads no counts its inputs: no counts, the public
    # dataset's size (``data`` is what the job will run on, never what it plans from)
    del data
    return METHOD.plan(SST2, config, Counts(None, len(PUBLIC)))


def written(plan: MethodPlan, result: SynthesisResult) -> dict[str, Any]:
    """Everything the job writes anywhere, less the named exceptions."""
    stored = plan.stored()
    out = result.to_dict()
    del out["demonstrations"], out["prompt"]  # the DP output
    assert "seconds" not in out["stats"]  # wall time follows the records' lengths
    for key in DP_STATS:
        del out["stats"][key]
    return {
        "row": {**stored_row(plan), "public_records": plan.public_records},
        "api": {
            "summary": METHOD.summary(stored),
            "settings": METHOD.settings(stored),
            "public_stats": {
                k: v for k, v in (METHOD.public_stats(result) or {}).items() if k not in DP_STATS
            },
        },
        "out": out,
    }


@pytest.mark.parametrize("accounting", list(Accounting))
def test_neighbouring_datasets_write_the_same_job_but_for_its_dp_outputs(accounting):
    seen = {}
    for name, data in neighbours().items():
        plan = plan_for(data, accounting)
        seen[name] = written(plan, plan.run(data, PateFakeBackend(), None, PUBLIC))
    first = seen["D"]
    assert first["row"]["delta"] == DEFAULT_DELTA  # public, never 1/|D|
    assert "n_private" not in first["out"]["plan"]
    assert first["row"]["config"]["sizes"] == {"private": 0, "public": len(PUBLIC)}
    for name in ("D minus one", "D relabelled"):
        assert seen[name] == first, name


def test_only_a_declared_public_count_can_refuse_a_job():
    """Refusing a dataset too small to fill one teacher would tell its size; unless the owner
    declared the count public, the job runs, its short teachers abstain, and the noisy
    threshold check decides (here: nothing passes, a DP outcome)."""
    tiny = private_records(1)
    config = METHOD.configure(
        SST2,
        epsilon=12.0,
        delta=None,
        shots=2,
        accounting=Accounting.TIGHT,
        params={**PARAMS, "shots": 2},
        seed=3,
    )
    declared = Counts.declared(partition_sizes(SST2, tiny), len(PUBLIC))
    with pytest.raises(PateError, match=r"1 private record\(s\) cannot fill"):
        METHOD.plan(SST2, config, declared)
    assert not METHOD.reads_counts  # the service gives it no counts otherwise
    plan = METHOD.plan(SST2, config, Counts(None, len(PUBLIC)))
    assert plan.stored().config["sizes"]["private"] == 0  # no count was read
    with pytest.raises(PateError, match=r"only 0 public input\(s\) were labelled"):
        plan.run(tiny, PateFakeBackend(), None, PUBLIC)


def test_a_stored_job_without_a_delta_in_its_config_rebuilds_at_the_rows_delta():
    """The row's delta is the one the job was charged at: a config without one (an older
    job, stored before issue 32's ``public_counts`` too) rebuilds at it, never at a default
    computed from the count."""
    stored = plan_for(private_records(400)).stored()
    old_config = copy.deepcopy(dict(stored.config))
    old_config["pate"].pop("public_counts")
    assert old_config["pate"]["delta"] is None
    rebuilt = METHOD.rebuild(SST2, dataclasses.replace(stored, config=old_config, delta=1e-5))
    assert rebuilt.delta == 1e-5
    assert rebuilt.epsilon() <= 12.0


def test_the_jobs_record_says_whether_the_owner_declared_the_count_public():
    data = private_records(400)
    counts = Counts(None, len(PUBLIC))  # what the service gives it: it reads no counts
    config = METHOD.configure(
        SST2, epsilon=12.0, delta=None, shots=2, accounting=Accounting.TIGHT, params=PARAMS
    )
    released = METHOD.plan(SST2, config, counts).stored()
    assert METHOD.counts_mode(released) is None  # its plan reads no private count
    assert released.config["pate"]["public_counts"] is False
    declared = Counts.declared(partition_sizes(SST2, data), len(PUBLIC))
    stored = METHOD.plan(SST2, config, declared).stored()
    assert METHOD.counts_mode(stored) is CountsMode.DECLARED_PUBLIC
