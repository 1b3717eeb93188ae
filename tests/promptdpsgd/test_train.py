"""DP-SGD on a soft prompt: per-example gradients are each example's own, clipping bounds
one record's contribution (C add/remove, 2C replace-one), empty batches step on noise alone,
and training without noise learns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.privacy.dpsgd import noisy_clipped_sum
from app.privacy.sampling import FixedSizeSampling, PoissonSampling
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.backend import SoftPromptedBackend, training_model
from app.promptdpsgd.config import PromptDpsgdConfig, PromptDpsgdError
from app.promptdpsgd.forward import soft_prompt_logits
from app.promptdpsgd.train import (
    freeze,
    initial_embeddings,
    per_example_gradients,
    soft_prompt_text,
    train_soft_prompt,
    verbaliser_ids,
)
from app.synthesis.data import Record
from app.synthesis.prompts import query_suffix
from app.synthesis.scoring import label_probabilities, predict_labels
from app.synthesis.tasks import BUILTIN_TASKS, TaskKind, TaskSpec
from tests.promptdpsgd.tiny import tiny_backend

SST2 = BUILTIN_TASKS["sst2"]
WORDS = ["great", "fun", "moving", "dull", "awful", "boring", "long", "short", "odd", "film"]


def records(n: int, seed: int = 0) -> list[Record]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = rng.choice(WORDS, size=rng.integers(2, 9))
        out.append(Record(text=" ".join(words), label=str(rng.choice(SST2.labels))))
    return out


def batch_inputs(backend, task, recs):
    index = {label: k for k, label in enumerate(task.labels)}
    prompts = [backend.tokenize(soft_prompt_text(task) + query_suffix(task, r.text)) for r in recs]
    return prompts, [index[r.label] for r in recs]


@pytest.fixture
def tiny():
    backend = tiny_backend()
    freeze(backend)
    return backend


def test_per_example_gradients_equal_one_at_a_time_gradients(tiny):
    recs = records(7)  # different lengths: padding must not leak between rows
    prompts, targets = batch_inputs(tiny, SST2, recs)
    labels = verbaliser_ids(tiny, SST2)
    soft = torch.randn(3, 32)
    together = per_example_gradients(tiny, tiny.model, soft, prompts, targets, labels)
    for b in range(len(recs)):
        alone = per_example_gradients(
            tiny, tiny.model, soft, prompts[b : b + 1], targets[b : b + 1], labels
        )
        np.testing.assert_allclose(together[b], alone[0], rtol=1e-4, atol=1e-6)
    assert np.all(np.linalg.norm(together, axis=1) > 0)
    # and the model itself receives no gradient
    assert all(p.grad is None and not p.requires_grad for p in tiny.model.parameters())


def test_one_record_moves_the_clipped_sum_by_at_most_c_add_remove_and_2c_replace(tiny):
    labels = verbaliser_ids(tiny, SST2)
    soft = torch.randn(4, 32)
    recs = records(9, seed=3)
    prompts, targets = batch_inputs(tiny, SST2, recs)
    grads = per_example_gradients(tiny, tiny.model, soft, prompts, targets, labels)
    clip = 0.2 * float(np.linalg.norm(grads, axis=1).min())  # every raw gradient exceeds C
    rng = np.random.default_rng(0)

    def total(rows: np.ndarray) -> np.ndarray:
        return noisy_clipped_sum(rows, clip_norm=clip, noise_multiplier=0.0, rng=rng)

    base = total(grads)
    # replace record 0 by a different record (another text, the other label)
    other = Record(
        text="awful boring dull film",
        label="positive" if recs[0].label == "negative" else "negative",
    )
    p2, t2 = batch_inputs(tiny, SST2, [other])
    replaced_row = per_example_gradients(tiny, tiny.model, soft, p2, t2, labels)
    assert np.linalg.norm(replaced_row) > clip
    replaced = total(np.vstack([replaced_row, grads[1:]]))
    removed = total(grads[1:])
    added = total(np.vstack([grads, replaced_row]))
    assert np.linalg.norm(base - removed) <= clip * (1 + 1e-9)
    assert np.linalg.norm(added - base) <= clip * (1 + 1e-9)
    assert np.linalg.norm(base - replaced) <= 2 * clip * (1 + 1e-9)
    # the raw (unclipped) sums move by much more: the bound is the clipping's doing
    assert np.linalg.norm(grads.sum(0) - grads[1:].sum(0)) > 4 * clip


def test_the_clipping_bound_holds_with_the_real_model(gemma):
    freeze(gemma)
    labels = verbaliser_ids(gemma, SST2)
    config = PromptDpsgdConfig(epsilon=1.0, prompt_length=4)
    soft = initial_embeddings(gemma, SST2, config)
    recs = [
        Record("a gorgeous, witty film", "negative"),  # mislabelled: large gradients
        Record("dull and lifeless", "positive"),
        Record("a joy from start to finish", "negative"),
    ]
    prompts, targets = batch_inputs(gemma, SST2, recs)
    grads = per_example_gradients(gemma, gemma.model, soft, prompts, targets, labels)
    clip = 0.5 * float(np.linalg.norm(grads, axis=1).min())
    rng = np.random.default_rng(0)
    full = noisy_clipped_sum(grads, clip_norm=clip, noise_multiplier=0.0, rng=rng)
    for i in range(len(recs)):
        rest = noisy_clipped_sum(
            np.delete(grads, i, 0), clip_norm=clip, noise_multiplier=0.0, rng=rng
        )
        assert np.linalg.norm(full - rest) <= clip * (1 + 1e-6)
    # The training forward and the serving wrapper answer alike for one soft prompt.
    sp = SoftPrompt(gemma.name, soft.numpy())
    served = label_probabilities(
        SoftPromptedBackend(gemma, sp), SST2, soft_prompt_text(SST2), [r.text for r in recs]
    )
    with torch.no_grad():
        logits = soft_prompt_logits(
            gemma.model,
            soft.unsqueeze(0).expand(len(recs), -1, -1),
            prompts,
            bos_id=gemma.tokenizer.bos_token_id,
            pad_id=gemma._pad_id,
        )
    trained = torch.softmax(logits[:, labels].double(), dim=1).numpy()
    np.testing.assert_allclose(served, trained, atol=1e-4)


@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_empty_batches_step_on_noise_alone(tiny, sigma):
    config = PromptDpsgdConfig(epsilon=1.0, prompt_length=3, steps=3, batch_size=1)
    recs = records(50)
    start = initial_embeddings(tiny, SST2, config).numpy()
    out = train_soft_prompt(
        SST2,
        recs,
        tiny,
        config=config,
        noise_multiplier=sigma,
        sampling=PoissonSampling(rate=1e-12, groups=1),  # never samples a record
        rng=np.random.default_rng(1),
    )
    moved = np.abs(out.embeddings - start).max()
    assert (moved > 1e-4) if sigma > 0 else (moved == 0.0)


def test_progress_is_called_per_step_and_a_cancellation_stops_training(tiny):
    config = PromptDpsgdConfig(epsilon=1.0, prompt_length=2, steps=5, batch_size=4)
    seen = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if done == 2:
            raise KeyboardInterrupt("cancelled")

    with pytest.raises(KeyboardInterrupt):
        train_soft_prompt(
            SST2,
            records(20),
            tiny,
            config=config,
            noise_multiplier=1.0,
            sampling=FixedSizeSampling(population=20, groups=1, group_size=4),
            rng=np.random.default_rng(0),
            progress=progress,
        )
    assert seen == [(1, 5), (2, 5)]


def test_labels_that_start_with_the_same_token_are_refused(tiny):
    task = TaskSpec(
        name="same-start",
        kind=TaskKind.CLASSIFICATION,
        instruction="x",
        icl_instruction="x",
        text_field="Text",
        label_field="Label",
        labels=("a", "b"),
        verbalisers={"a": "very good", "b": "very bad"},
    )
    with pytest.raises(PromptDpsgdError, match="start with the same token"):
        verbaliser_ids(tiny, task)


def test_training_without_noise_learns_a_word_to_label_rule(gemma):
    """Labels named by unrelated words (apple/banana), so the model cannot know the task
    zero-shot; 8 noiseless steps on 12 one-word records teach the soft prompt the rule."""
    task = TaskSpec(
        name="fruit",
        kind=TaskKind.CLASSIFICATION,
        instruction="x",
        icl_instruction="x",
        text_field="Review",
        label_field="Answer",
        labels=("negative", "positive"),
        verbalisers={"negative": "apple", "positive": "banana"},
    )
    good = ["wonderful", "great", "loved it", "delightful", "superb", "moving"]
    bad = ["terrible", "awful", "hated it", "boring", "dreadful", "tedious"]
    recs = [Record(t, "positive") for t in good] + [Record(t, "negative") for t in bad]
    config = PromptDpsgdConfig(
        epsilon=1.0, prompt_length=4, steps=8, batch_size=12, learning_rate=0.3, clip_norm=1e3
    )

    def accuracy(backend) -> float:
        probs = label_probabilities(backend, task, soft_prompt_text(task), [r.text for r in recs])
        return float(
            np.mean([p == r.label for p, r in zip(predict_labels(task, probs), recs, strict=True)])
        )

    start = SoftPrompt(gemma.name, initial_embeddings(gemma, task, config).numpy())
    before = accuracy(SoftPromptedBackend(gemma, start))
    trained = train_soft_prompt(
        task,
        recs,
        gemma,
        config=config,
        noise_multiplier=0.0,
        sampling=FixedSizeSampling(population=12, groups=1, group_size=12),
        rng=np.random.default_rng(0),
    )
    after = accuracy(SoftPromptedBackend(gemma, trained))
    assert after >= 0.75 and after > before + 0.2  # measured: 0.5 -> 0.92


def test_training_takes_the_shared_model_lock_around_each_step(tiny):
    import threading

    from app.llm.retry import RetryingBackend, RetryPolicy
    from app.promptdpsgd.backend import model_lock

    lock = threading.Lock()
    wrapped = RetryingBackend(tiny, retry=RetryPolicy(), lock=lock)
    assert model_lock(wrapped) is lock
    held = []
    original = tiny.model.forward

    def forward(*args, **kwargs):
        held.append(lock.locked())
        return original(*args, **kwargs)

    tiny.model.forward = forward
    config = PromptDpsgdConfig(epsilon=1.0, prompt_length=2, steps=2, batch_size=4)
    train_soft_prompt(
        SST2,
        records(8),
        wrapped,
        config=config,
        noise_multiplier=0.0,
        sampling=FixedSizeSampling(population=8, groups=1, group_size=4),
        rng=np.random.default_rng(0),
    )
    assert held and all(held)


def test_a_record_with_a_label_outside_the_task_is_refused_without_naming_it(tiny):
    config = PromptDpsgdConfig(epsilon=1.0, prompt_length=2, steps=1, batch_size=2)
    recs = [*records(4), Record("fine", "secretlabel")]
    with pytest.raises(PromptDpsgdError, match="1 record") as caught:
        train_soft_prompt(
            SST2,
            recs,
            tiny,
            config=config,
            noise_multiplier=1.0,
            sampling=PoissonSampling(rate=0.5, groups=1),
            rng=np.random.default_rng(0),
        )
    assert "secretlabel" not in str(caught.value)


def test_a_bfloat16_backend_trains_on_a_float32_twin_it_keeps():
    """The service's model may be bfloat16 (dtype auto); training then runs on one float32
    copy per backend, whose gradients are those of a float32 backend with the same weights,
    and the served model is left as it was."""
    served = tiny_backend()
    served.model.to(torch.bfloat16)
    served.dtype = torch.bfloat16
    freeze(served)
    twin = training_model(served)
    assert twin is not served.model and twin is training_model(served)  # made once
    assert next(twin.parameters()).dtype == torch.float32
    assert served.model.dtype == torch.bfloat16
    reference = tiny_backend()
    reference.model.load_state_dict(twin.state_dict())  # bfloat16-rounded weights, in float32
    freeze(reference)
    assert training_model(reference) is reference.model  # float32: no copy
    recs = records(5)
    prompts, targets = batch_inputs(served, SST2, recs)
    labels = verbaliser_ids(served, SST2)
    soft = torch.randn(3, 32)
    got = per_example_gradients(served, twin, soft, prompts, targets, labels)
    want = per_example_gradients(reference, reference.model, soft, prompts, targets, labels)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    config = PromptDpsgdConfig(epsilon=1.0, prompt_length=3, steps=2, batch_size=4)
    out = train_soft_prompt(
        SST2,
        recs,
        served,
        config=config,
        noise_multiplier=0.0,
        sampling=PoissonSampling(rate=0.8, groups=1),
        rng=np.random.default_rng(0),
    )
    assert out.embeddings.dtype == np.float32 and served.model.dtype == torch.bfloat16
