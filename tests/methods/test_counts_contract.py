"""What a plan may read of the private counts (issue 41): released estimates or declared
counts, through :class:`app.methods.base.Counts` only, and one public default delta."""

from __future__ import annotations

import pytest

from app.methods import (
    DEFAULT_DELTA,
    CountRelease,
    Counts,
    JobConfig,
    count_noise_multiplier,
    posterior_mean,
    release_counts,
)
from app.methods.base import CountsUnavailableError, plan_local
from app.methods.registry import get_method
from app.privacy.accounting import Accounting
from app.privacy.rng import make_rng
from app.results import SynthesisResult
from app.synthesis.tasks import BUILTIN_TASKS

SST2 = BUILTIN_TASKS["sst2"]
EXACT = {"negative": 300, "positive": 40}


def _config(name: str, **params):
    return get_method(name).configure(
        SST2, epsilon=4.0, delta=None, shots=2, accounting=Accounting.TIGHT, params=params
    )


def test_counts_cannot_be_built_from_bare_numbers():
    """The old constructor (labels, private, public, declared_public) is gone: a plan is
    handed a release, a declaration, or a typed shape, nothing else."""
    with pytest.raises(TypeError):
        Counts({"negative": 300, "positive": 40}, 340)  # type: ignore[call-arg]
    with pytest.raises(CountsUnavailableError):
        _ = Counts(None).labels


def test_a_plan_reads_the_releases_estimates_never_the_counts_behind_it():
    release = CountRelease(22.0, {"negative": 250.0, "positive": -15.0}, 0.2, 5e-8, "r1")
    plan = get_method("tang").plan(SST2, _config("tang"), Counts.released(release)).plan
    estimates = release.estimates()
    assert plan.planned_sizes == {k: estimates[k] for k in plan.planned_sizes}
    assert estimates["positive"] == round(posterior_mean(-15.0, 22.0)) > 1  # no floor
    assert plan.release_id == "r1" and not plan.config.public_counts


def test_a_local_run_releases_once_and_reports_the_whole_cost():
    """``plan_local``: 5% of the target to the release, the rest to the job; the two add up
    to at most the target, at the target's delta."""
    local = plan_local(get_method("tang"), SST2, _config("tang"), EXACT, declared_public=False)
    assert local.release is not None
    assert local.release.sigma == pytest.approx(count_noise_multiplier(0.2, 0.05 * DEFAULT_DELTA))
    assert local.plan.epsilon() <= 4.0 * 0.95 + 1e-9
    assert local.epsilon() <= 4.0 and local.epsilon() > 3.9
    assert local.delta() == pytest.approx(DEFAULT_DELTA)
    # a saved run says how its counts were released, beside the whole cost
    result = SynthesisResult(
        "sst2", "tang", "m", [], "", 3.8, 0.95 * DEFAULT_DELTA, plan={}, event={}
    )
    reported = local.report(result)
    assert reported.epsilon == pytest.approx(3.8 + local.release.epsilon)
    assert reported.stats["count_release_sigma"] == local.release.sigma
    assert reported.stats["count_release_epsilon"] == local.release.epsilon
    declared = plan_local(get_method("tang"), SST2, _config("tang"), EXACT, declared_public=True)
    assert declared.release is None and declared.plan.plan.planned_sizes == EXACT


def test_a_method_that_reads_no_counts_gets_none():
    pate = get_method("promptpate")
    assert not pate.reads_counts
    local = plan_local(pate, SST2, _config("promptpate"), EXACT, declared_public=False, public=200)
    assert local.release is None and local.plan.plan.n_private == 0


def test_one_public_default_delta():
    """JobConfig (what a plug-in subclasses) and every built-in method default to 1e-6."""
    assert JobConfig(epsilon=1.0).delta == DEFAULT_DELTA
    release = release_counts(EXACT, 0.2, 5e-8, make_rng(1))
    for name in ("tang", "adadpsyn", "promptdpsgd"):
        counts = Counts.released(release)
        config = _config(name) if name != "promptdpsgd" else _config(name, batch_size=8)
        assert get_method(name).plan(SST2, config, counts).delta == DEFAULT_DELTA
