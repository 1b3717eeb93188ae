"""Text answers from a vLLM OpenAI-compatible server, streamed (``app.llm.generation``'s
other engine; the packaged model's is :func:`app.llm.generation.local_generate`).

Chat messages go to the server's ``/v1/chat/completions``, which applies the served model's
chat template. A model without one (a base model such as the packaged Gemma-3-270M) makes
vLLM answer 400; from then on this server's chat requests are sent as a plain transcript
(:func:`app.llm.generation.transcript`) to ``/v1/completions``, as the local engine does.
Errors name the server and the status in our words, never the server's text (which may quote
the request), as :mod:`app.llm.vllm_http` does.

A constraint on the answer (``constraint``: vLLM's ``structured_outputs`` or OpenAI's
``response_format``, as the app wrote them) is sent as it is, so vLLM's own structured-output
decoding writes the answer. Log-probabilities asked for (``GenerationParams.logprobs``) are
asked of vLLM in each endpoint's words and come back as :class:`Logprobs` before each piece.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from app.llm.base import BackendError, TransientBackendError
from app.llm.generation import (
    LOGPROB_FLOOR,
    TRANSCRIPT_STOPS,
    ChatMessage,
    Finished,
    Generated,
    GenerationParams,
    Logprobs,
    TokenLogprob,
    transcript,
)
from app.tls import client_context

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


class VLLMGenerator:
    """One vLLM server's text answers (thread-safe: httpx's client is)."""

    def __init__(self, url: str, model: str, *, timeout: float = 120.0) -> None:
        self.url, self.model = url.rstrip("/"), model
        self._client = httpx.Client(timeout=httpx.Timeout(timeout), verify=client_context())
        self._has_template: bool | None = None  # unknown until the first chat request

    def close(self) -> None:
        self._client.close()

    def chat(
        self,
        messages: Sequence[ChatMessage],
        params: GenerationParams,
        constraint: Mapping[str, Any] | None = None,
    ) -> Generated:
        """The answer to ``messages``: through the served model's chat template, or as a
        transcript when it has none."""
        if self._has_template is not False:
            try:
                body = {"messages": list(messages), **(constraint or {})}
                yield from self._stream(CHAT, body, params)
                self._has_template = True
                return
            except _NoChatTemplateError:
                self._has_template = False
        stops = (*params.stop, *TRANSCRIPT_STOPS)
        params = params.model_copy(update={"stop": stops})
        yield from self.complete(transcript(messages), params, constraint)

    def complete(
        self,
        prompt: str | dict[str, Any],
        params: GenerationParams,
        constraint: Mapping[str, Any] | None = None,
    ) -> Generated:
        """The continuation of ``prompt``: a text, or the request field that carries it
        (``VLLMHttpBackend.text_prompt``: a soft prompt's embeddings in front)."""
        field = {"prompt": prompt} if isinstance(prompt, str) else prompt
        yield from self._stream(COMPLETIONS, {**field, **(constraint or {})}, params)

    def _stream(self, endpoint: str, body: dict[str, Any], params: GenerationParams) -> Generated:
        request = {
            **body,
            **_logprobs_fields(endpoint, params.logprobs),
            "model": self.model,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stop": list(params.stop) or None,
            "seed": params.seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        where = f"vLLM server {self.url} {endpoint}"
        try:
            with self._client.stream("POST", self.url + endpoint, json=request) as response:
                if response.status_code != 200:
                    _refused(response, where, endpoint)
                yield from _events(response.iter_lines(), where)
        except httpx.TimeoutException as err:
            raise TransientBackendError(f"{where}: timed out ({type(err).__name__})") from None
        except httpx.TransportError as err:
            raise TransientBackendError(
                f"{where}: connection failed ({type(err).__name__})"
            ) from None


def _logprobs_fields(endpoint: str, asked: int | None) -> dict[str, Any]:
    """The request fields that ask ``endpoint`` for ``asked`` alternatives per token."""
    if asked is None:
        return {}
    if endpoint == CHAT:
        return {"logprobs": True, "top_logprobs": asked}
    return {"logprobs": asked}


class _NoChatTemplateError(Exception):
    """The served model has no chat template (vLLM's 400 says so)."""


def _refused(response: httpx.Response, where: str, endpoint: str) -> None:
    """Raise for a non-200 answer: transient for 429 and 5xx, else final with its status."""
    status = response.status_code
    text = response.read().decode(errors="replace").lower()
    if endpoint == CHAT and status == 400 and "chat template" in text:
        raise _NoChatTemplateError
    message = f"{where}: HTTP {status}"
    if "maximum context length" in text or "context length" in text:
        message += " (the prompt and max_tokens exceed the model's context length)"
    if status == 429 or status >= 500:
        raise TransientBackendError(message, status=status)
    raise BackendError(message, status=status)


def _events(lines: Iterator[str], where: str) -> Generated:
    """The pieces of text of a server-sent event stream (each after its :class:`Logprobs`
    when the stream has them), then :class:`Finished`.

    vLLM sends a token's log-probability when it makes the token, but holds back text that
    may begin a stop string, and then sends it in pieces of its own (seen: tokens `` Paris``,
    ``\n``, ``User``, ``:`` with texts "", "", " Par", "is" before the stop ``\nUser:``). So a
    token goes out with the first piece of text that reaches into it (:class:`_Spelled`),
    and the tokens of the stop string, whose text never comes, are left out."""
    reason, usage = "length", {"prompt_tokens": 0, "completion_tokens": 0}
    spelled = _Spelled()
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            raise BackendError(f"{where}: a streamed event is not JSON") from None
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            text = choice.get("text")
            if text is None:
                text = (choice.get("delta") or {}).get("content")
            if choice.get("logprobs"):
                spelled.add(_logprobs(choice["logprobs"]).tokens)
            if text:
                yield from spelled.piece(text)
            if choice.get("finish_reason"):
                reason = "stop" if choice["finish_reason"] == "stop" else "length"
    yield Finished(
        "stop" if reason == "stop" else "length",
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )


class _Spelled:
    """Tokens waiting for their text: each with where it starts in the answer's text."""

    def __init__(self) -> None:
        self.waiting: list[tuple[int, TokenLogprob]] = []
        self.tokens_end = 0  # characters the tokens so far spell
        self.sent = 0  # characters of text sent so far

    def add(self, tokens: Sequence[TokenLogprob]) -> None:
        for token in tokens:
            self.waiting.append((self.tokens_end, token))
            self.tokens_end += len(token.token)

    def piece(self, text: str) -> Generated:
        """``text``, after the tokens it reaches into (when the stream has any)."""
        self.sent += len(text)
        reached = [token for start, token in self.waiting if start < self.sent]
        if reached:
            self.waiting = self.waiting[len(reached) :]
            yield Logprobs(tuple(reached))
        yield text


def _logprobs(given: dict[str, Any]) -> Logprobs:
    """A chunk's ``logprobs``, in the chat endpoint's shape (``content``: one entry a token,
    with its ``top_logprobs``) or the completions endpoint's (``tokens``,
    ``token_logprobs``, ``top_logprobs``: one mapping a token)."""
    if "content" in given:
        return Logprobs(tuple(_chat_entry(entry) for entry in given["content"] or []))
    tokens, values = given["tokens"], given["token_logprobs"]
    tops = given.get("top_logprobs") or [None] * len(tokens)
    entries = zip(tokens, values, tops, strict=True)
    return Logprobs(tuple(_completion_entry(*entry) for entry in entries))


def _chat_entry(entry: dict[str, Any]) -> TokenLogprob:
    top = tuple((str(t["token"]), _floor(t["logprob"])) for t in entry.get("top_logprobs") or [])
    return TokenLogprob(str(entry["token"]), _floor(entry["logprob"]), top)


def _completion_entry(token: str, value: Any, top: dict[str, Any] | None) -> TokenLogprob:
    pairs = sorted(((str(t), _floor(v)) for t, v in (top or {}).items()), key=lambda p: -p[1])
    return TokenLogprob(str(token), _floor(value), tuple(pairs))


def _floor(value: Any) -> float:
    """A log-probability from vLLM (``-inf``, or null for none), at least the floor."""
    return LOGPROB_FLOOR if value is None else max(float(value), LOGPROB_FLOOR)
