"""Text generation for the OpenAI-compatible endpoint (``app.api.routes.openai``).

The methods only need next-token distributions (:class:`app.llm.base.LLMBackend`); an app
that reads a DP prompt through ``POST /v1/chat/completions`` needs text. Two engines give it:

* the packaged model (embedded deployment): :func:`local_generate`, a decoding loop on the
  backend's own ``top_k`` and ``next_token_probs`` (so the text-only vocabulary of
  :mod:`app.llm.text` and a PromptDPSGD soft prompt in front both apply), inside one KV
  scope so that each token costs one incremental forward pass;
* vLLM (production): its own OpenAI server, which streams (``VLLMHttpBackend.generate``).

Both yield the answer as pieces of text, then one :class:`Finished`. Nothing here reads
private data: the prompt is a DP output and the app's messages are the app's own.

Chat messages become text the model was trained on when it has a chat template (the
tokenizer's, applied by transformers or by vLLM); a base model without one (the packaged
Gemma-3-270M) reads a plain transcript, :func:`transcript`, which stops at the next turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.llm.base import LLMBackend, kv_scope

#: Candidates a sampled token is drawn from (the model's most probable text tokens).
SAMPLE_TOP_K = 40
#: What a transcript turn starts with, and so where an answer in transcript form stops.
TRANSCRIPT_ROLES = {"system": "System", "user": "User", "assistant": "Assistant"}
TRANSCRIPT_STOPS = ("\nUser:", "\nSystem:")

ChatMessage = dict[str, str]


class GenerationParams(BaseModel):
    """How to decode one answer (validated where the request is read)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int = Field(ge=1)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Finished:
    """The end of an answer: why it ended and what it used, in tokens."""

    reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int


Generated = Iterator["str | Finished"]


def transcript(messages: Sequence[ChatMessage]) -> str:
    """Chat messages as a plain transcript for a model without a chat template: the system
    message first, then ``User: ...`` / ``Assistant: ...`` lines, ending with ``Assistant:``
    for the model to continue; the answer ends at the next ``User:`` line
    (:data:`TRANSCRIPT_STOPS`)."""
    lines = []
    for message in messages:
        role = TRANSCRIPT_ROLES.get(message["role"], message["role"].capitalize())
        content = " ".join(message["content"].split())
        lines.append(content + "\n" if message["role"] == "system" else f"{role}: {content}")
    return "\n".join(lines) + "\nAssistant:"


def local_generate(backend: LLMBackend, prompt: str, params: GenerationParams) -> Generated:
    """Decode ``params.max_tokens`` tokens at most after ``prompt`` on a local backend.

    Temperature 0 takes the most probable text token (greedy, one forward pass a token);
    otherwise a token is drawn from the :data:`SAMPLE_TOP_K` most probable, their
    probabilities raised to 1 / temperature and cut to the smallest set holding ``top_p``.
    Ends at the model's end-of-sequence token or at a stop string (left out of the text)."""
    rng = np.random.default_rng(params.seed)
    context = backend.tokenize(prompt)
    answer: list[int] = []
    sent = ""
    reason: Literal["stop", "length"] = "length"
    with kv_scope(backend) as scoped:
        for _ in range(params.max_tokens):
            token = _next_token(scoped, context + answer, params, rng)
            if token == scoped.eos_id:
                reason = "stop"
                break
            answer.append(token)
            text, stopped = _cut_at_stop(scoped.detokenize(answer), params.stop)
            if len(text) > len(sent) and not _partial_stop(text, params.stop):
                yield text[len(sent) :]
                sent = text
            if stopped:
                reason = "stop"
                break
    text, _ = _cut_at_stop(backend.detokenize(answer), params.stop)
    if len(text) > len(sent):
        yield text[len(sent) :]
    yield Finished(reason, len(context), len(answer))


def _next_token(
    backend: LLMBackend, context: list[int], params: GenerationParams, rng: np.random.Generator
) -> int:
    if params.temperature == 0.0:
        return int(backend.top_k([context], 1)[0, 0])
    top = backend.top_k([context], SAMPLE_TOP_K)
    probs = backend.next_token_probs([context], top)[0]
    weights = np.power(np.clip(probs, 1e-300, None), 1.0 / params.temperature)
    weights /= weights.sum()
    order = np.argsort(-weights)
    keep = order[: int(np.searchsorted(np.cumsum(weights[order]), params.top_p)) + 1]
    chosen = rng.choice(keep, p=weights[keep] / weights[keep].sum())
    return int(top[0, chosen])


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string, and whether one occurred."""
    cuts = [text.find(stop) for stop in stops if stop and stop in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _partial_stop(text: str, stops: Sequence[str]) -> bool:
    """Whether ``text`` ends with the beginning of a stop string (hold it back: the next
    token may complete the stop, which is then never sent)."""
    return any(text.endswith(stop[:n]) for stop in stops for n in range(1, len(stop)))
