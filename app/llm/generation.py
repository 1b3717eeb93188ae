"""Text generation for the OpenAI-compatible endpoint (``app.api.routes.openai``).

The methods only need next-token distributions (:class:`app.llm.base.LLMBackend`); an app
that reads a DP prompt through ``POST /v1/chat/completions`` needs text. Two engines give it:

* the packaged model (embedded deployment): :func:`local_generate`, a decoding loop on the
  backend's own ``top_k`` and ``next_token_probs`` (so the text-only vocabulary of
  :mod:`app.llm.text` and a PromptDPSGD soft prompt in front both apply), inside one KV
  scope so that each token costs one incremental forward pass;
* vLLM (production): its own OpenAI server, which streams (``VLLMHttpBackend.generate``).

Both yield the answer as pieces of text, then one :class:`Finished`; when the request asks for
log-probabilities (``GenerationParams.logprobs``), each piece of text is preceded by the
:class:`Logprobs` of the tokens that wrote it. Nothing here reads private data: the prompt is a
DP output and the app's messages are the app's own.

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
#: Prompt tokens read in one call on a local engine: each call holds the engine (the
#: provider's lock), so a long prompt read in pieces lets other answers run between them.
#: 128 tokens take about 0.15 s on the packaged Gemma on 2 CPU cores; reading a 1,678-token
#: prompt in such pieces took no longer than in one pass (docs/service.md, "Engine time").
PREFILL_CHUNK = 128
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
    logprobs: int | None = Field(None, ge=0, le=20)
    """Each answer token's log-probability and this many alternatives' (None: not asked)."""


@dataclass(frozen=True)
class Finished:
    """The end of an answer: why it ended and what it used, in tokens."""

    reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class TokenLogprob:
    """One answer token (its text), its log-probability, and the most probable tokens at
    its place with theirs (most probable first)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Logprobs:
    """The tokens of the piece of text that follows, with their log-probabilities."""

    tokens: tuple[TokenLogprob, ...]


Generated = Iterator["str | Logprobs | Finished"]

#: The log-probability written for a probability of 0 (JSON has no -inf; OpenAI's floor).
LOGPROB_FLOOR = -9999.0


def logprob(p: float) -> float:
    """``log(p)``, at least :data:`LOGPROB_FLOOR`."""
    return float(max(np.log(p), LOGPROB_FLOOR)) if p > 0 else LOGPROB_FLOOR


def draw(probs: np.ndarray, params: GenerationParams, rng: np.random.Generator) -> int:
    """The index of one draw from ``probs`` at the request's temperature and ``top_p``: the
    probabilities raised to 1 / temperature and cut to the smallest set holding ``top_p``;
    the most probable (the first of equal ones) at temperature 0."""
    if params.temperature == 0.0:
        return int(np.argmax(probs))
    weights = np.power(np.clip(probs, 1e-300, None), 1.0 / params.temperature)
    weights /= weights.sum()
    order = np.argsort(-weights, kind="stable")
    keep = order[: int(np.searchsorted(np.cumsum(weights[order]), params.top_p)) + 1]
    return int(rng.choice(keep, p=weights[keep] / weights[keep].sum()))


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
    otherwise a token is drawn from the :data:`SAMPLE_TOP_K` most probable (:func:`draw`).
    Ends at the model's end-of-sequence token or at a stop string (left out of the text)."""
    rng = np.random.default_rng(params.seed)
    context = backend.tokenize(prompt)
    answer: list[int] = []
    pending: list[TokenLogprob] = []  # the log-probabilities of tokens not yet sent as text
    sent = ""
    reason: Literal["stop", "length"] = "length"
    with kv_scope(backend) as scoped:
        if scoped is not backend:  # a scope that keeps what it read: read in pieces
            for end in range(PREFILL_CHUNK, len(context), PREFILL_CHUNK):
                scoped.top_k([context[:end]], 1)
        for _ in range(params.max_tokens):
            token, entry = _next_token(scoped, context + answer, params, rng)
            if token == scoped.eos_id:
                reason = "stop"
                break
            answer.append(token)
            pending.extend([entry] if entry is not None else [])
            text, stopped = _cut_at_stop(scoped.detokenize(answer), params.stop)
            if len(text) > len(sent) and not _partial_stop(text, params.stop):
                yield from _piece(text[len(sent) :], pending, params)
                sent = text
            if stopped:
                reason = "stop"
                break
    text, _ = _cut_at_stop(backend.detokenize(answer), params.stop)
    if len(text) > len(sent):
        yield from _piece(text[len(sent) :], pending, params)
    yield Finished(reason, len(context), len(answer))


def _piece(text: str, pending: list[TokenLogprob], params: GenerationParams) -> Generated:
    """``text``, after the log-probabilities of the tokens that wrote it when asked for
    (``pending`` is emptied)."""
    if params.logprobs is not None:
        yield Logprobs(tuple(pending))
        pending.clear()
    yield text


def _next_token(
    backend: LLMBackend, context: list[int], params: GenerationParams, rng: np.random.Generator
) -> tuple[int, TokenLogprob | None]:
    """The next token, and its log-probability entry when the request asks for them: among
    the :data:`SAMPLE_TOP_K` most probable text tokens, the set a token is drawn from."""
    if params.temperature == 0.0 and params.logprobs is None:
        return int(backend.top_k([context], 1)[0, 0]), None
    top = backend.top_k([context], SAMPLE_TOP_K)
    probs = np.asarray(backend.next_token_probs([context], top)[0], dtype=np.float64)
    chosen = draw(probs, params, rng)
    token = int(top[0, chosen])
    if params.logprobs is None:
        return token, None
    words = [backend.detokenize([int(t)]) for t in top[0, : params.logprobs]]
    alternatives = tuple((w, logprob(p)) for w, p in zip(words, probs, strict=False))
    entry = TokenLogprob(backend.detokenize([token]), logprob(probs[chosen]), alternatives)
    return token, entry


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string, and whether one occurred."""
    cuts = [text.find(stop) for stop in stops if stop and stop in text]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _partial_stop(text: str, stops: Sequence[str]) -> bool:
    """Whether ``text`` ends with the beginning of a stop string (hold it back: the next
    token may complete the stop, which is then never sent)."""
    return any(text.endswith(stop[:n]) for stop in stops for n in range(1, len(stop)))
