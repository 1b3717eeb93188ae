"""PromptDPSGD through the registry: planned from counts, refused on a backend without
gradients before it reads a record, and one tiny real-model run end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from app.llm.retry import RetryingBackend, RetryPolicy
from app.methods.base import Stored
from app.methods.registry import (
    Counts,
    CountsMode,
    MethodKind,
    ParamsError,
    configure,
    get_method,
)
from app.privacy.accounting import Accounting, TightPldAccountant
from app.privacy.dpsgd import calibrate_dpsgd
from app.privacy.events import DpsgdEvent, GaussianEvent, from_dict, to_dict
from app.privacy.unit import DEFAULT_DELTA, count_noise_multiplier
from app.promptdpsgd import plan as plan_module
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.backend import GradientAccessError, SoftPromptedBackend
from app.promptdpsgd.config import PromptDpsgdError
from app.results import SynthesisError
from app.synthesis.data import Record
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import BUILTIN_TASKS
from tests.synthesis.fake_backend import FakeBackend

SST2 = BUILTIN_TASKS["sst2"]
METHOD = get_method(MethodKind.PROMPTDPSGD)


def plan_for(n: int, accounting=Accounting.TIGHT, *, public=False, **params):
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=4, accounting=accounting, params=params
    )
    counts = Counts({"negative": n // 2, "positive": n - n // 2}, n, declared_public=public)
    return METHOD.plan(SST2, config, counts)


@pytest.mark.parametrize("accounting", list(Accounting))
def test_with_declared_public_counts_the_plan_samples_from_the_exact_count(accounting):
    plan = plan_for(1000, accounting, public=True, steps=20, batch_size=10)
    event = plan.event()
    assert isinstance(event, DpsgdEvent) and event.steps == 20
    assert event.sampling.rate == pytest.approx(0.01) and event.count_release is None
    assert 4.0 * 0.99 <= plan.epsilon() <= 4.0
    assert plan.delta == DEFAULT_DELTA  # public, never 1/|D| (issue 32)
    assert plan.progress_total == 20 and plan.expected_records == 1000
    assert plan.plan.config.public_counts  # the owner's declaration is on the job's record
    assert METHOD.unit == "steps" and METHOD.needs_gradients


def test_otherwise_the_count_is_released_and_the_release_is_part_of_the_price():
    plan = plan_for(1000, steps=20, batch_size=10)
    event = plan.event()
    count_sigma = count_noise_multiplier(4.0, DEFAULT_DELTA)
    assert event.count_release == GaussianEvent(count_sigma)
    assert not plan.plan.config.public_counts
    planned = plan.plan.n_planned
    assert event.sampling.rate == pytest.approx(min(1.0, 10 / planned))
    assert abs(planned - 1000) < 6 * count_sigma  # a Gaussian release of 1000
    # the steps' noise is calibrated so that the whole job, the release included, meets 4
    assert 4.0 * 0.99 <= plan.epsilon() <= 4.0
    steps_alone = dataclasses.replace(event, count_release=None)
    assert TightPldAccountant().dataset_epsilon(steps_alone, plan.delta) < plan.epsilon()
    assert plan.delta == DEFAULT_DELTA and plan.expected_records == 1000
    # admission's release is stored, and the worker's rebuild does not draw another
    rebuilt = METHOD.rebuild(SST2, plan.stored())
    assert rebuilt.event() == event and rebuilt.plan == plan.plan


def test_paper_accounting_needs_declared_public_counts():
    """Fixed-size batches are drawn from exactly n records: n must be public (issue 32)."""
    with pytest.raises(PromptDpsgdError, match="public_counts") as caught:
        plan_for(1000, Accounting.PAPER, steps=20, batch_size=10)
    assert isinstance(caught.value, ValueError)
    assert "1000" not in str(caught.value)


def test_a_job_is_refused_from_public_inputs_only_never_from_the_released_count(monkeypatch):
    """A target that no released count could let the job meet is refused before the count
    is released; otherwise even a released count below the batch size plans (rate 1)."""

    def no_release(*args):
        raise AssertionError("the count was released for a job that is refused")

    monkeypatch.setattr(plan_module, "release_counts", no_release)
    config = configure(
        METHOD,
        SST2,
        epsilon=0.02,
        delta=None,
        shots=None,
        accounting=Accounting.TIGHT,
        params={"steps": 10_000},
    )
    messages = set()
    for n in (10, 100_000):
        with pytest.raises(PromptDpsgdError, match="whatever the number of records") as caught:
            METHOD.plan(SST2, config, Counts({}, n))
        messages.add(str(caught.value))
    assert len(messages) == 1  # the same refusal, whatever the count
    monkeypatch.setattr(plan_module, "release_counts", lambda sizes, sigma, rng: {"records": 3})
    plan = plan_for(1000, steps=5, batch_size=64)
    assert plan.event().sampling.rate == 1.0 and plan.plan.n_planned == 3


def test_parameters_are_validated_and_others_refused():
    with pytest.raises(ParamsError, match="clip_norm"):
        plan_for(100, clip_norm=0)
    with pytest.raises(ParamsError, match=r"params\.teachers: a parameter of method promptpate"):
        plan_for(100, teachers=3)
    with pytest.raises(PromptDpsgdError, match="batch_size 64 exceeds the 20"):
        plan_for(20, public=True, batch_size=64)  # a public count may be named
    with pytest.raises(PromptDpsgdError, match="classification task"):
        config = configure(
            METHOD,
            BUILTIN_TASKS["mitg"],
            epsilon=1.0,
            delta=None,
            shots=None,
            accounting=Accounting.TIGHT,
            params={},
        )
        METHOD.plan(BUILTIN_TASKS["mitg"], config, Counts({"*": 100}, 100))


def test_a_backend_without_gradients_is_refused_before_any_record_is_read():
    plan = plan_for(40, steps=2, batch_size=4)

    class Untouchable(list):
        def __iter__(self):
            raise AssertionError("a record was read")

        def __len__(self):
            raise AssertionError("a record was counted")

    fake = RetryingBackend(FakeBackend(), retry=RetryPolicy())
    with pytest.raises(GradientAccessError, match="local transformers backend") as caught:
        plan.check_backend(fake)
    assert isinstance(caught.value, SynthesisError)  # the runner reports its message as is
    with pytest.raises(GradientAccessError):
        plan.run(Untouchable(), fake, None)


def test_a_tiny_real_run_through_the_registry(gemma):
    rng = np.random.default_rng(0)
    texts = {
        "positive": ["a fine film", "truly great", "loved it"],
        "negative": ["dull", "a mess", "boring"],
    }
    recs = [Record(str(rng.choice(texts[lab])), lab) for lab in ["positive", "negative"] * 10]
    plan = plan_for(20, steps=2, batch_size=4, prompt_length=2)
    seen = []
    result = plan.run(recs, gemma, lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]
    assert result.method == "promptdpsgd" and result.demonstrations == []
    assert result.model == gemma.name and result.epsilon <= 4.0
    assert isinstance(from_dict(result.event), DpsgdEvent)
    assert result.epsilon == pytest.approx(
        TightPldAccountant().dataset_epsilon(from_dict(result.event), result.delta)  # type: ignore[arg-type]
    )
    soft = result.soft_prompt
    assert soft is not None and soft.length == 2 and soft.model == gemma.name
    assert SoftPrompt.from_bytes(soft.to_bytes()).sha256 == soft.sha256
    probs = label_probabilities(SoftPromptedBackend(gemma, soft), SST2, result.prompt, ["great"])
    assert probs.shape == (1, 2) and np.isclose(probs.sum(), 1.0)
    assert METHOD.public_stats(result) == {
        "steps": 2,
        "prompt_length": 2,
        "noise_multiplier": plan.plan.noise_multiplier,
    }
    dumped = str(result.to_dict())
    assert not any(text in dumped for group in texts.values() for text in group)


def test_the_jobs_record_says_how_it_knew_the_count():
    assert METHOD.counts_mode(plan_for(100, steps=2).stored()) is CountsMode.RELEASED
    declared = plan_for(100, public=True, steps=2).stored()
    assert METHOD.counts_mode(declared) is CountsMode.DECLARED_PUBLIC
    assert declared.config["count_sigma"] is None


def test_a_job_stored_before_the_count_release_rebuilds_to_the_event_it_reserved():
    """Old rows: no planned count, no count_sigma, no public_counts, a delta of 1/n."""
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=1e-3, shots=None, accounting=Accounting.TIGHT,
        params={"steps": 20, "batch_size": 10},
    )  # fmt: skip
    sigma, _ = calibrate_dpsgd(
        target_epsilon=4.0, delta=1e-3, accounting=Accounting.TIGHT, n=1000, batch_size=10,
        steps=20,
    )  # fmt: skip
    reserved = {
        "type": "dpsgd",
        "noise_multiplier": sigma,
        "sampling": {"type": "poisson", "rate": 0.01, "groups": 1},
        "steps": 20,
    }
    stored_config = {"promptdpsgd": config.model_dump(mode="json"), "sizes": {"private": 1000}}
    del stored_config["promptdpsgd"]["public_counts"]
    rebuilt = METHOD.rebuild(SST2, Stored(config=stored_config, schedule=[], delta=1e-3))
    assert to_dict(rebuilt.event()) == reserved
    assert rebuilt.expected_records == 1000
    assert METHOD.counts_mode(Stored(config=stored_config, schedule=[], delta=1e-3)) is None
