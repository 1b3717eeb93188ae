"""An OpenAI-compatible endpoint: any OpenAI SDK or framework reads a DP prompt through it.

``model`` is a prompt ID and the bearer token a key of the prompt's tenant (a
``prompts:read`` key is enough): ``POST /v1/chat/completions`` answers the app's messages
after the prompt's chat messages, ``POST /v1/completions`` continues the prompt's text
followed by the app's, both streamed as server-sent events on ``"stream": true``;
``GET /v1/models`` lists the prompts the key may read. The engine is the service's own
(:mod:`app.services.openai_compat`); the limits, the usage count and what is read are
described there. A classification prompt answers with one of its labels unless the app asks
for free text or its own choices (:mod:`app.services.answer_forms`); ``logprobs`` come back in
OpenAI's shape of each route (a label answer's: the label distribution). Errors have OpenAI's
shape (``app.api.errors``): an unknown prompt is a 404 ``not_found_error``, a revoked key a
401, a soft prompt on vLLM a 409.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from app.api.deps import AnyKey, ProviderDep, SessionDep
from app.api.engine_gate import EngineSlot, Slot
from app.api.openai_errors import OPENAI_PREFIX, OpenAIRoute
from app.api.openai_schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    Usage,
)
from app.llm.base import BackendError
from app.llm.generation import Finished, GenerationParams, Logprobs, TokenLogprob
from app.services import openai_compat as service
from app.services import prompts
from app.services.openai_compat import Answer, Limits

log = logging.getLogger(__name__)
router = APIRouter(prefix=OPENAI_PREFIX, tags=["openai"], route_class=OpenAIRoute)

#: The most prompt sets ``GET /v1/models`` lists (newest first; OpenAI's list has no pages).
MODELS_LISTED = 1000
_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "With stream: events."}
}


@router.get("/models", response_model=ModelList, summary="The prompts this key may read")
def list_models(principal: AnyKey, session: SessionDep) -> ModelList:
    rows = prompts.list_prompt_sets(session, principal.tenant_id, limit=MODELS_LISTED, offset=0)
    return ModelList(data=[_card(row) for row in rows])


@router.get("/models/{model_id}", response_model=ModelCard, summary="One prompt as a model")
def get_model(model_id: str, principal: AnyKey, session: SessionDep) -> ModelCard:
    return _card(prompts.get_prompt_set(session, principal.tenant_id, model_id))


def _card(row: Any) -> ModelCard:
    return ModelCard(id=row.id, created=int(row.created_at.timestamp()), owned_by="dpsyn")


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses=_STREAM,
    summary="Answer chat messages after a DP prompt's (model: the prompt ID)",
)
def chat_completions(
    body: ChatCompletionRequest,
    principal: AnyKey,
    slot: EngineSlot,
    session: SessionDep,
    provider: ProviderDep,
    request: Request,
) -> Response:
    messages = [message.message() for message in body.messages]
    params = _decoding(request, body, [m["content"] for m in messages], "messages")
    row = prompts.get_prompt_set(session, principal.tenant_id, body.model)
    answer = service.chat(row, messages, params, provider, body.asked_form())  # lazy: no pass yet
    session.rollback()  # hold no transaction while waiting for the engine or running it
    slot.enter()
    return _respond(request, slot, answer, body, "chat")


@router.post(
    "/completions",
    response_model=ChatCompletion,
    responses=_STREAM,
    summary="Continue a DP prompt's text followed by the app's (model: the prompt ID)",
)
def completions(
    body: CompletionRequest,
    principal: AnyKey,
    slot: EngineSlot,
    session: SessionDep,
    provider: ProviderDep,
    request: Request,
) -> Response:
    params = _decoding(request, body, [body.prompt], "prompt")
    row = prompts.get_prompt_set(session, principal.tenant_id, body.model)
    answer = service.complete(row, body.prompt, params, provider, body.asked_form())
    session.rollback()
    slot.enter()
    return _respond(request, slot, answer, body, "text")


def _decoding(
    request: Request, body: ChatCompletionRequest | CompletionRequest, texts: list[str], field: str
) -> GenerationParams:
    """The request's decoding, after its text (``texts``, the ``field``) and ``max_tokens``
    were checked against this server's limits."""
    settings = request.app.state.settings
    limits = Limits(settings.openai_max_tokens, settings.openai_max_input_chars)
    service.check_input(limits, texts, field)
    newer = getattr(body, "max_completion_tokens", None)
    asked = newer or body.max_tokens
    return service.decoding(
        limits,
        max_tokens=asked,
        temperature=body.temperature,
        top_p=body.top_p,
        stop=body.stops(),
        seed=body.seed,
        logprobs=body.logprobs_asked(),
        max_tokens_field="max_completion_tokens" if newer else "max_tokens",
    )


class _Reply:
    """One answer in OpenAI's words: a chat completion or a text completion."""

    def __init__(self, answer: Answer, kind: str, logprobs: bool) -> None:
        self.answer, self.kind, self.logprobs = answer, kind, logprobs
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        self.id, self.created = f"{prefix}-{secrets.token_hex(12)}", int(time.time())
        self.offset = 0  # where the next text completion token starts in the answer

    def _base(self, object_: str) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created,
                "model": self.answer.prompt_id}  # fmt: skip

    def whole(self, text: str, tokens: list[TokenLogprob], finished: Finished) -> dict[str, Any]:
        logprobs = self._logprobs(tokens)
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": logprobs, "finish_reason": finished.reason}  # fmt: skip
            return {**self._base("chat.completion"), "choices": [choice], "usage": _usage(finished)}
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finished.reason}
        return {**self._base("text_completion"), "choices": [choice], "usage": _usage(finished)}

    def chunk(
        self, text: str | None, tokens: list[TokenLogprob], reason: str | None
    ) -> dict[str, Any]:
        logprobs = self._logprobs(tokens) if text is not None else None
        if self.kind == "chat":
            delta = {"role": "assistant", "content": text} if text is not None else {}
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
            return {**self._base("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": reason}
        return {**self._base("text_completion"), "choices": [choice]}

    def usage_chunk(self, finished: Finished) -> dict[str, Any]:
        object_ = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._base(object_), "choices": [], "usage": _usage(finished)}

    def _logprobs(self, tokens: list[TokenLogprob]) -> dict[str, Any] | None:
        """``tokens`` in the route's shape: chat's ``content`` list, or a text completion's
        parallel lists (``text_offset`` counting from the answer's start); None when the app
        did not ask."""
        if not self.logprobs:
            return None
        if self.kind == "chat":
            return {"content": [_chat_logprob(t) for t in tokens], "refusal": None}
        offsets = []
        for token in tokens:
            offsets.append(self.offset)
            self.offset += len(token.token)
        return {
            "tokens": [t.token for t in tokens],
            "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [dict(t.top) for t in tokens],
            "text_offset": offsets,
        }


def _chat_logprob(token: TokenLogprob) -> dict[str, Any]:
    def entry(text: str, value: float) -> dict[str, Any]:
        return {"token": text, "logprob": value, "bytes": list(text.encode())}

    top = [entry(text, value) for text, value in token.top]
    return {**entry(token.token, token.logprob), "top_logprobs": top}


def _usage(finished: Finished) -> dict[str, int]:
    total = finished.prompt_tokens + finished.completion_tokens
    usage = Usage(
        prompt_tokens=finished.prompt_tokens,
        completion_tokens=finished.completion_tokens,
        total_tokens=total,
    )
    return usage.model_dump()


def _respond(
    request: Request,
    slot: Slot,
    answer: Answer,
    body: ChatCompletionRequest | CompletionRequest,
    kind: str,
) -> Response:
    reply = _Reply(answer, kind, body.logprobs_asked() is not None)
    pieces = iter(answer.pieces)
    first = next(pieces)  # the engine's first answer: an early error is still an HTTP status
    sessions = request.app.state.sessions

    def record(done: Finished) -> None:
        service.record_usage(sessions, slot.key_id, done)
        slot.prompt_tokens = done.prompt_tokens  # charged to the key's rate as the slot ends

    if not body.stream:
        texts: list[str] = []
        tokens: list[TokenLogprob] = []
        item: str | Logprobs | Finished = first
        while not isinstance(item, Finished):
            if isinstance(item, Logprobs):
                tokens.extend(item.tokens)
            else:
                texts.append(item)
            item = next(pieces)
        record(item)
        content = json.dumps(reply.whole("".join(texts), tokens, item))
        return Response(content, media_type="application/json")

    events = _events(reply, first, pieces, body.usage_in_stream(), record)
    headers = {"Cache-Control": "no-store"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def _events(
    reply: _Reply,
    first: str | Logprobs | Finished,
    rest: Iterator[str | Logprobs | Finished],
    usage: bool,
    record: Callable[[Finished], None],
) -> Iterator[str]:
    """The answer as server-sent events, then ``[DONE]``; each piece of text carries the
    log-probabilities of its tokens; an engine failure mid-answer is an ``error`` event (the
    status was sent with the first piece)."""
    item = first
    tokens: list[TokenLogprob] = []
    try:
        while not isinstance(item, Finished):
            if isinstance(item, Logprobs):
                tokens.extend(item.tokens)
            else:
                yield _event(reply.chunk(item, tokens, None))
                tokens = []
            item = next(rest)
    except BackendError as err:
        error = {"message": str(err), "type": "server_error", "param": None}
        yield _event({"error": {**error, "code": "model_backend_error"}})
        return
    record(item)
    yield _event(reply.chunk(None, [], item.reason))
    if usage:
        yield _event(reply.usage_chunk(item))
    yield "data: [DONE]\n\n"


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"
