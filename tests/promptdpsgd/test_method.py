"""PromptDPSGD through the registry: planned from counts, refused on a backend without
gradients before it reads a record, and one tiny real-model run end to end."""

from __future__ import annotations

import numpy as np
import pytest

from app.llm.retry import RetryingBackend, RetryPolicy
from app.methods.registry import Counts, MethodKind, ParamsError, configure, get_method
from app.privacy.accounting import Accounting, TightPldAccountant
from app.privacy.events import DpsgdEvent, from_dict
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


def plan_for(n: int, accounting=Accounting.TIGHT, **params):
    config = configure(
        METHOD, SST2, epsilon=4.0, delta=None, shots=4, accounting=accounting, params=params
    )
    return METHOD.plan(SST2, config, Counts({"negative": n // 2, "positive": n - n // 2}, n))


@pytest.mark.parametrize("accounting", list(Accounting))
def test_the_plan_comes_from_counts_and_prices_the_whole_dataset(accounting):
    plan = plan_for(1000, accounting, steps=20, batch_size=10)
    event = plan.event()
    assert isinstance(event, DpsgdEvent) and event.steps == 20
    assert event.sampling.rate == pytest.approx(0.01)
    assert 4.0 * 0.99 <= plan.epsilon() <= 4.0
    assert plan.delta == pytest.approx(1 / 1000)
    assert plan.progress_total == 20 and plan.expected_records == 1000
    assert METHOD.unit == "steps" and METHOD.needs_gradients


def test_parameters_are_validated_and_others_refused():
    with pytest.raises(ParamsError, match="clip_norm"):
        plan_for(100, clip_norm=0)
    with pytest.raises(ParamsError, match=r"params\.teachers: a parameter of method promptpate"):
        plan_for(100, teachers=3)
    with pytest.raises(PromptDpsgdError, match="batch_size 64 exceeds the 20"):
        plan_for(20, batch_size=64)
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
