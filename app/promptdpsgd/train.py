"""Training a soft prompt with DP-SGD (PromptDPSGD, Duan et al. 2023), model frozen.

Each record is asked as the scorer asks it: ``[BOS] + soft prompt + tokens of
(soft_prompt_text(task) + query_suffix(task, text))`` (:mod:`.forward`). The hard prompt
:func:`soft_prompt_text` is empty: the soft prompt stands in for the task's instruction,
which is left out of training and serving alike (the result's ``prompt`` is that empty
text). The loss is the cross-entropy of its label among the labels' verbaliser tokens (the
first token of each label's ``answer_text``) at the next position: what
:func:`app.synthesis.scoring.label_probabilities` scores when the labels start with
different tokens (a task whose labels do not is refused). So what is trained is what is
served.

One step (the mechanism and its sensitivity are in :mod:`app.privacy.dpsgd`):

1. draw the batch with the plan's sampling from *all* records (Poisson with rate
   ``batch_size / n~`` under the tight accountant, ``n~`` the count released under DP or
   declared public, so the batch size varies and an empty batch still steps with noise
   alone; exactly ``batch_size`` without replacement under the paper accountant, whose
   count is public);
2. per-example gradients of the soft prompt: every example gets its own copy of the prompt
   (``expand(...).clone()``), so one batched forward/backward of the summed loss leaves
   example b's gradient in ``copy.grad[b]`` (rows never interact: each has its own mask);
3. clip each to ``clip_norm``, sum, add ``N(0, (sigma * clip_norm)^2)`` from the job's
   CSPRNG-seeded generator (:func:`app.privacy.rng.make_rng`), divide by the *expected*
   batch size (a public constant), and take an Adam step (post-processing).

The model's weights are frozen (``requires_grad`` off, eval mode). Nothing here logs or
returns record text; the result is the last iterate, a DP release.

CPU sizing (Gemma-3-270M, float32, 2 cores; ``docs/synthesis.md``): one step of 16 SST-2
examples takes 3.2-3.6 s on idle cores (18-20 s in bfloat16, so the CLI trains in float32),
so the default 60 steps take about 3.5 minutes; at epsilon 1 they lifted SST-2 test accuracy
(200 queries) from 0.62 (the untrained soft prompt) to 0.885.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from app.llm.base import LLMBackend
from app.llm.transformers_backend import TransformersBackend
from app.privacy.dpsgd import noisy_clipped_sum
from app.privacy.events import to_dict
from app.privacy.rng import make_rng
from app.privacy.sampling import Sampling
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.backend import hidden_size, local_backend, model_lock, training_model
from app.promptdpsgd.config import PromptDpsgdConfig, PromptDpsgdError, SoftPromptInit
from app.promptdpsgd.forward import soft_prompt_logits
from app.promptdpsgd.plan import METHOD, PromptDpsgdPlan
from app.results import Progress, SynthesisResult
from app.synthesis.data import Record
from app.synthesis.prompts import answer_text, query_suffix
from app.synthesis.tasks import TaskSpec


def soft_prompt_text(task: TaskSpec) -> str:
    """The hard prompt between the soft prompt and the query, in training and in serving:
    none. The soft prompt replaces the instruction; leaving the instruction's 15-20 tokens
    out makes every example's forward/backward about a third cheaper on CPU."""
    del task
    return ""


def verbaliser_ids(backend: LLMBackend, task: TaskSpec) -> list[int]:
    """The first token of each label's answer, in label order; refused unless they differ."""
    firsts: dict[int, str] = {}
    out = []
    for label in task.labels:
        tokens = backend.tokenize(answer_text(task, label))
        if not tokens:
            raise PromptDpsgdError(f"label {label!r} has an empty answer for this model")
        if tokens[0] in firsts:
            raise PromptDpsgdError(
                f"labels {firsts[tokens[0]]!r} and {label!r} start with the same token for "
                "this model; PromptDPSGD trains on the first token of each label's answer, "
                "so give them verbalisers that start differently"
            )
        firsts[tokens[0]] = label
        out.append(tokens[0])
    return out


def initial_embeddings(local: TransformersBackend, task: TaskSpec, config: PromptDpsgdConfig):
    """The starting soft prompt (``prompt_length x hidden`` float32 tensor), from public
    text only: the labels' verbaliser tokens or the instruction, cycled to the length."""
    if config.init is SoftPromptInit.LABELS:
        text = "".join(answer_text(task, label) for label in task.labels)
    else:
        text = task.icl_instruction
    ids = local.tokenize(text) or [local.eos_id]
    cycled = [ids[i % len(ids)] for i in range(config.prompt_length)]
    with torch.no_grad():
        embedded = local.model.get_input_embeddings()(torch.tensor([cycled], device=local.device))
    return embedded[0].detach().float().cpu().clone()


def freeze(local: TransformersBackend) -> None:
    """Eval mode and no weight gradients: only the soft prompt is trained (the backend's
    inference paths never need weight gradients, so this is left in place)."""
    local.model.eval()
    for param in local.model.parameters():
        param.requires_grad_(False)


def per_example_gradients(
    local: TransformersBackend,
    model: torch.nn.Module,
    soft: torch.Tensor,
    prompts: Sequence[Sequence[int]],
    targets: Sequence[int],
    label_ids: Sequence[int],
) -> np.ndarray:
    """``B x (L * hidden)``: row b is the gradient of example b's loss with respect to the
    soft prompt, in chunks of the backend's batch size (memory). ``model`` is the backend's
    model or its float32 twin (:func:`~app.promptdpsgd.backend.training_model`)."""
    rows = len(prompts)
    length, width = soft.shape
    out = np.zeros((rows, length * width), dtype=np.float64)
    if rows == 0:
        return out
    order = sorted(range(rows), key=lambda i: len(prompts[i]))
    chunk_size = max(1, local.batch_size)
    columns = torch.as_tensor(list(label_ids), dtype=torch.long)
    for start in range(0, rows, chunk_size):
        chunk = order[start : start + chunk_size]
        copies = soft.detach().unsqueeze(0).expand(len(chunk), -1, -1).clone()
        copies.requires_grad_(True)
        logits = soft_prompt_logits(
            model,
            copies,
            [prompts[i] for i in chunk],
            bos_id=local.tokenizer.bos_token_id,
            pad_id=local._pad_id,
        )
        chosen = logits[:, columns.to(logits.device)]
        wanted = torch.as_tensor([targets[i] for i in chunk], device=logits.device)
        loss = torch.nn.functional.cross_entropy(chosen, wanted, reduction="sum")
        loss.backward()
        assert copies.grad is not None
        out[chunk] = copies.grad.reshape(len(chunk), -1).double().cpu().numpy()
    return out


def train_soft_prompt(
    task: TaskSpec,
    records: Sequence[Record],
    backend: LLMBackend,
    *,
    config: PromptDpsgdConfig,
    noise_multiplier: float,
    sampling: Sampling,
    rng: np.random.Generator,
    progress: Progress | None = None,
) -> SoftPrompt:
    """Run ``config.steps`` DP-SGD steps and return the last soft prompt.

    ``noise_multiplier`` (noise std / clip norm) and ``sampling`` come from the plan, whose
    event the ledger charged; 0 noise is for tests only. ``progress`` is called after every
    step; an exception it raises (a cancellation) stops training there and propagates.
    """
    local = local_backend(backend)
    lock = model_lock(backend)  # the model may be shared with /complete: one pass at a time
    label_ids = verbaliser_ids(local, task)
    index = {label: k for k, label in enumerate(task.labels)}
    if stray := sum(r.label not in index for r in records):
        # the count only: a label value outside the task's public labels is private data
        raise PromptDpsgdError(f"{stray} record(s) carry a label the task does not have")
    freeze(local)
    model = training_model(local)
    prefix = soft_prompt_text(task)
    prompts = [local.tokenize(prefix + query_suffix(task, r.text)) for r in records]
    targets = [index[r.label] for r in records]

    soft = torch.nn.Parameter(initial_embeddings(local, task, config))
    optimiser = torch.optim.Adam([soft], lr=config.learning_rate)
    shape = tuple(soft.shape)
    for step in range(config.steps):
        (batch,) = sampling.draw(len(records), rng)
        with lock:
            grads = per_example_gradients(
                local,
                model,
                soft,
                [prompts[i] for i in batch],
                [targets[i] for i in batch],
                label_ids,
            )
        noisy = noisy_clipped_sum(
            grads,
            clip_norm=config.clip_norm,
            noise_multiplier=noise_multiplier,
            rng=rng,
            shape=shape,
        )
        optimiser.zero_grad()
        soft.grad = torch.from_numpy(noisy / config.batch_size).float()
        optimiser.step()
        if progress is not None:
            progress(step + 1, config.steps)
    embeddings = soft.detach().cpu().numpy().astype(np.float32)
    if embeddings.shape[1] != hidden_size(local):  # cannot happen; guards the artifact
        raise PromptDpsgdError("the trained soft prompt does not fit the model")
    return SoftPrompt(model=local.name, embeddings=embeddings)


def run_promptdpsgd(
    task: TaskSpec,
    records: Sequence[Record],
    plan: PromptDpsgdPlan,
    backend: LLMBackend,
    *,
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """Train the planned job on ``records`` and return it as a result (no demonstrations;
    the prompt is the hard text that follows the soft prompt)."""
    if rng is None:
        rng = make_rng(plan.config.seed)
    soft = train_soft_prompt(
        task,
        records,
        backend,
        config=plan.config,
        noise_multiplier=plan.noise_multiplier,
        sampling=plan.sampling,
        rng=rng,
        progress=progress,
    )
    return SynthesisResult(
        task=task.name,
        method=METHOD,
        model=backend.name,
        demonstrations=[],
        prompt=soft_prompt_text(task),
        epsilon=plan.epsilon(),
        delta=plan.delta,
        plan=plan.to_dict(),
        event=to_dict(plan.event()),
        stats={
            "steps": plan.config.steps,
            "prompt_length": soft.length,
            "noise_multiplier": plan.noise_multiplier,
        },
        soft_prompt=soft,
    )
