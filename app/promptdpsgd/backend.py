"""A local backend that answers every prompt with a soft prompt in front of it.

``SoftPromptedBackend(inner, soft_prompt)`` implements :class:`~app.llm.base.LLMBackend`:
each prompt runs as ``[BOS] + soft prompt + prompt tokens`` (:mod:`.forward`, the same pass
the trainer used). So the one scorer (:func:`app.synthesis.scoring.label_probabilities`),
``dpsyn eval``, ``dpsyn audit`` and ``/complete`` answer queries with a trained soft prompt
without knowing it is there.

Only a local transformers model can take input embeddings (and give gradients for
training); a vLLM server cannot, so :func:`local_backend` refuses it with
:class:`GradientAccessError`, naming the backend. A soft prompt trained for another model,
or of another hidden size, is refused with :class:`SoftPromptMismatch`.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import torch

from app.llm.base import BackendError, LLMBackend, SameTokenizer
from app.llm.transformers_backend import LastLogitsAnswers, TransformersBackend
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.forward import soft_prompt_logits
from app.results import SynthesisError

__all__ = [
    "GradientAccessError",
    "SoftPromptMismatch",
    "SoftPromptMismatchError",
    "SoftPromptedBackend",
    "hidden_size",
    "local_backend",
    "model_lock",
    "training_model",
]


class GradientAccessError(SynthesisError):
    """The backend cannot take input embeddings or give gradients (not a local model).

    A :class:`SynthesisError` (so a ValueError): the CLI and the job runner report its
    message, which names the backend only, as the user's problem."""


class SoftPromptMismatchError(ValueError):
    """The soft prompt was trained for another model (or has another hidden size)."""


SoftPromptMismatch = SoftPromptMismatchError  # the name the serving side imports


def _describe(backend: object) -> str:
    kind = type(backend).__name__
    if kind == "VLLMHttpBackend":
        return "the vLLM server backend (VLLMHttpBackend)"
    return f"backend {kind}"


def local_backend(backend: LLMBackend | object) -> TransformersBackend:
    """The local transformers model behind ``backend`` (unwrapping the retry layer, which
    the job runner and ``/complete`` put around every backend), or
    :class:`GradientAccessError` naming what it is instead."""
    inner = backend
    seen = 0
    while not isinstance(inner, TransformersBackend) and hasattr(inner, "_backend") and seen < 8:
        inner = inner._backend  # app.llm.retry.RetryingBackend keeps its backend here
        seen += 1
    if not isinstance(inner, TransformersBackend):
        raise GradientAccessError(
            f"PromptDPSGD needs the local transformers backend (gradients and input "
            f"embeddings); {_describe(inner)} offers neither. Run it with the local model "
            "(--backend transformers, or DPSYN_BACKEND=transformers for the service)."
        )
    return inner


_TWINS: weakref.WeakKeyDictionary[TransformersBackend, torch.nn.Module] = (
    weakref.WeakKeyDictionary()
)
_TWINS_LOCK = threading.Lock()


def training_model(local: TransformersBackend) -> torch.nn.Module:
    """The model to train a soft prompt on: the backend's own when it runs in float32, else
    a float32 copy of it, made once per backend and kept (frozen, eval mode).

    Why a copy: the service loads its model with ``dtype=auto``, which is bfloat16 on CPUs
    that compute it natively, and there a DP-SGD step's backward pass is about 5x slower
    than in float32 (3.2-3.6 s vs 18-20 s for 16 SST-2 examples on this project's CPU). The
    copy costs the model's size in float32 (about 1.1 GB for Gemma-3-270M); the weights are
    the same up to bfloat16 rounding, and the trained soft prompt is served by the backend's
    own model (``SoftPromptedBackend`` casts it to the model's dtype)."""
    if local.model.dtype == torch.float32:
        return local.model
    with _TWINS_LOCK:
        twin = _TWINS.get(local)
        if twin is None:
            twin = copy.deepcopy(local.model).float()
            twin.eval()
            for param in twin.parameters():
                param.requires_grad_(False)
            _TWINS[local] = twin
        return twin


def model_lock(backend: LLMBackend | object) -> AbstractContextManager[object]:
    """The lock that serialises the local model's forward passes, if a wrapper of
    ``backend`` holds one (``RetryingBackend(..., lock=provider.use_lock)``: the job runner
    and ``/complete`` share one model, whose passes are not re-entrant); else a no-op.
    The trainer calls the model directly, so it takes this lock around each step."""
    inner = backend
    for _ in range(8):
        lock = getattr(inner, "_lock", None)
        if isinstance(lock, type(threading.Lock())):
            return lock
        if not hasattr(inner, "_backend"):
            break
        inner = inner._backend
    return nullcontext()


def hidden_size(backend: TransformersBackend) -> int:
    """Width of the model's input embeddings (what a soft prompt's rows must have)."""
    return int(backend.model.get_input_embeddings().weight.shape[1])


def check_soft_prompt(backend: TransformersBackend, soft_prompt: SoftPrompt) -> None:
    """:class:`SoftPromptMismatch` unless ``soft_prompt`` was made for this model."""
    if soft_prompt.model != backend.name:
        raise SoftPromptMismatchError(
            f"the soft prompt was trained for model {soft_prompt.model!r}, not for "
            f"{backend.name!r}: a soft prompt only works with the model it was trained on"
        )
    width = hidden_size(backend)
    if soft_prompt.hidden != width:
        raise SoftPromptMismatchError(
            f"the soft prompt's embeddings have {soft_prompt.hidden} dimensions; model "
            f"{backend.name!r} takes {width}"
        )


class SoftPromptedBackend(SameTokenizer, LastLogitsAnswers):
    """An :class:`LLMBackend` that puts ``soft_prompt`` in front of every prompt.

    It calls the local model directly (the retry layer of ``inner``, if any, is unwrapped),
    and takes no lock itself: where the model is shared between threads, wrap *this* object
    in ``RetryingBackend(..., lock=provider.use_lock)`` as for any backend (taking the lock
    here too would deadlock on that non-reentrant lock). The model's name, tokens and
    tokenizer are the local model's (:class:`~app.llm.base.SameTokenizer`): the soft prompt
    changes only the logits.
    """

    _backend: TransformersBackend  # the local model (SameTokenizer reads it too)

    def __init__(self, inner: LLMBackend | object, soft_prompt: SoftPrompt) -> None:
        local = local_backend(inner)
        check_soft_prompt(local, soft_prompt)
        self._backend = local
        self.soft_prompt = soft_prompt
        self._soft = torch.from_numpy(soft_prompt.embeddings.copy())

    @torch.inference_mode()
    def last_logits(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Next-token logits after the soft prompt and each prompt (B x vocabulary), in
        chunks of the inner backend's batch size, sorted by length (less padding)."""
        if not prompts:
            raise BackendError(f"{self.name}: empty batch")
        inner = self._backend
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[torch.Tensor] = []
        step = max(1, inner.batch_size)
        for start in range(0, len(order), step):
            chunk = [prompts[i] for i in order[start : start + step]]
            soft = self._soft.unsqueeze(0).expand(len(chunk), -1, -1)
            out.append(
                soft_prompt_logits(
                    inner.model,
                    soft,
                    chunk,
                    bos_id=inner.tokenizer.bos_token_id,
                    pad_id=inner._pad_id,
                ).cpu()
            )
        logits = torch.cat(out)
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.as_tensor(order)] = torch.arange(len(order))
        return logits[inverse]
