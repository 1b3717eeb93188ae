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
from app.privacy.unit import DEFAULT_DELTA, CountRelease, count_noise_multiplier
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


# The dataset's one count release (issue 41): a Gaussian release of its label counts, drawn
# and charged once by the service; each test's plan reads it as the service hands it over.
RELEASE_SIGMA = count_noise_multiplier(0.2, 5e-8)  # 5% of a budget of (4, 1e-6)


def release_of(n: int, offset: float = 0.0) -> CountRelease:
    """A release of a dataset of ``n`` records, its two noisy counts ``offset`` above each
    half (fixed, not drawn: the tests read what a plan makes of a given release)."""
    noisy = {"negative": n // 2 + offset, "positive": n - n // 2 + offset}
    return CountRelease(RELEASE_SIGMA, noisy, 0.2, 5e-8, id=f"release-{n}")


def plan_for(n: int, accounting=Accounting.TIGHT, *, public=False, **params):
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=4, accounting=accounting, params=params
    )
    halves = {"negative": n // 2, "positive": n - n // 2}
    counts = Counts.declared(halves) if public else Counts.released(release_of(n))
    return METHOD.plan(SST2, config, counts)


@pytest.mark.parametrize("accounting", list(Accounting))
def test_with_declared_public_counts_the_plan_samples_from_the_exact_count(accounting):
    plan = plan_for(1000, accounting, public=True, steps=20, batch_size=10)
    event = plan.event()
    assert isinstance(event, DpsgdEvent) and event.steps == 20
    assert event.sampling.rate == pytest.approx(0.01) and event.count_release is None
    assert 4.0 * 0.99 <= plan.epsilon() <= 4.0
    assert plan.delta == DEFAULT_DELTA  # public, never 1/|D| (issue 32)
    assert plan.progress_total == 20
    stored = plan.stored().config
    assert stored["sizes"] == {"planned": 1000} and stored["count_release"] is None
    assert plan.plan.config.public_counts  # the owner's declaration is on the job's record
    assert METHOD.unit == "steps" and METHOD.needs_gradients


@pytest.mark.parametrize("offset", [-37.4, 61.2])
def test_otherwise_the_plan_samples_from_the_datasets_release_charged_apart(offset):
    """The count comes from the dataset's one release (issue 41): the plan samples from the
    sum of its labels' estimates, whatever the exact count behind it, prices no release in
    its own event (the release has its own ledger line), and names the release it read."""
    release = release_of(1000, offset)
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=4, accounting=Accounting.TIGHT,
        params={"steps": 20, "batch_size": 10},
    )  # fmt: skip
    plan = METHOD.plan(SST2, config, Counts.released(release))
    event = plan.event()
    planned = sum(release.estimates().values())
    assert planned == pytest.approx(1000 + 2 * offset, abs=2)  # far above 1: the value
    assert plan.plan.n_planned == planned and event.count_release is None
    assert event.sampling.rate == pytest.approx(10 / planned)
    assert not plan.plan.config.public_counts
    assert 4.0 * 0.99 <= plan.epsilon() <= 4.0  # the job's own target: the release is apart
    assert plan.delta == DEFAULT_DELTA
    stored = plan.stored()
    assert stored.config["sizes"] == {"planned": planned}  # no exact count in the row
    assert stored.config["count_release"] == release.id and stored.config["count_sigma"] is None
    # the worker's rebuild reads the row and draws nothing
    rebuilt = METHOD.rebuild(SST2, stored)
    assert rebuilt.event() == event and rebuilt.plan == plan.plan


def test_paper_accounting_needs_declared_public_counts():
    """Fixed-size batches are drawn from exactly n records: n must be public (issue 32)."""
    with pytest.raises(PromptDpsgdError, match="public_counts") as caught:
        plan_for(1000, Accounting.PAPER, steps=20, batch_size=10)
    assert isinstance(caught.value, ValueError)
    assert "1000" not in str(caught.value)


def test_a_job_is_refused_from_public_inputs_and_the_released_count_only():
    """The plan's refusals read the config and the release, nothing else (issue 41): a
    release whose estimate falls below the batch size is refused (rather than planned at
    rate 1), naming the released estimate, a DP value, and never the exact count behind it
    (here 40 records, released as 20.4 and 22.3)."""
    small = CountRelease(RELEASE_SIGMA, {"negative": 20.4, "positive": 22.3}, 0.2, 5e-8)
    estimate = sum(small.estimates().values())
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=None, accounting=Accounting.TIGHT,
        params={"steps": 5, "batch_size": 64},
    )  # fmt: skip
    assert estimate < 64 and estimate != 40
    with pytest.raises(PromptDpsgdError, match=f"exceeds the {estimate} records the counts"):
        METHOD.plan(SST2, config, Counts.released(small))
    fits = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=None, accounting=Accounting.TIGHT,
        params={"steps": 5, "batch_size": estimate},
    )  # fmt: skip
    assert METHOD.plan(SST2, fits, Counts.released(small)).event().sampling.rate == 1.0


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
        METHOD.plan(BUILTIN_TASKS["mitg"], config, Counts.declared({"*": 100}))


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
    released = plan_for(100, steps=2).stored()
    assert METHOD.counts_mode(released) is CountsMode.RELEASED
    assert released.config["count_release"] == "release-100"
    declared = plan_for(100, public=True, steps=2).stored()
    assert METHOD.counts_mode(declared) is CountsMode.DECLARED_PUBLIC
    assert declared.config["count_sigma"] is None and declared.config["count_release"] is None


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
    assert rebuilt.plan.n_planned == 1000
    assert METHOD.counts_mode(Stored(config=stored_config, schedule=[], delta=1e-3)) is None


def test_a_job_that_released_its_own_count_rebuilds_to_the_event_it_reserved():
    """Rows of issue 32 (before the dataset-level release): the exact count for the worker,
    the released one it sampled from, and the release's multiplier, priced inside the
    job's event. They rebuild, price and say "released" as they did."""
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=None, accounting=Accounting.TIGHT,
        params={"steps": 20, "batch_size": 10},
    )  # fmt: skip
    count_sigma = 19.0
    sigma, _ = calibrate_dpsgd(
        target_epsilon=4.0, delta=DEFAULT_DELTA, accounting=Accounting.TIGHT, n=1012,
        batch_size=10, steps=20, count_sigma=count_sigma,
    )  # fmt: skip
    stored = Stored(
        config={
            "promptdpsgd": config.model_dump(mode="json"),
            "sizes": {"private": 1000, "planned": 1012},
            "count_sigma": count_sigma,
        },
        schedule=[],
        delta=DEFAULT_DELTA,
    )
    rebuilt = METHOD.rebuild(SST2, stored)
    event = rebuilt.event()
    assert event.count_release == GaussianEvent(count_sigma)  # priced inside, as it was
    assert event.noise_multiplier == sigma and event.sampling.rate == pytest.approx(10 / 1012)
    assert 4.0 * 0.99 <= rebuilt.epsilon() <= 4.0
    steps_alone = dataclasses.replace(event, count_release=None)
    assert TightPldAccountant().dataset_epsilon(steps_alone, DEFAULT_DELTA) < rebuilt.epsilon()
    assert METHOD.counts_mode(stored) is CountsMode.RELEASED
