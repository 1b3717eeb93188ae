"""A DP prompt in front of an app's own messages: the OpenAI-compatible endpoint's service.

``model`` in an OpenAI request names a prompt set; the answer is the engine's continuation of
the prompt's chat messages (:func:`dpsyn_client.chat.chat_messages`, the rendering the client
and ``?format=messages`` use) followed by the app's messages, or, for ``/v1/completions``, of
the prompt's text followed by the app's text. The engine is the one the service runs
(:mod:`app.llm.generation`): the packaged model when embedded, vLLM's server in production.

A read key must not turn the engine into a free general-purpose model, so every request is
bounded here: ``max_tokens`` at most :attr:`Limits.max_tokens`, the app's text at most
:attr:`Limits.max_input_chars`, one choice; and each answer's tokens are counted for its key
(:func:`record_usage`, shown to the tenant's admins in ``GET /v1/keys``). The per-key request
rate is the API's (``app.api.limits``), as for ``/complete``.

The answer's form (:mod:`app.services.answer_forms`): a classification prompt answers with
one of its labels, by ``/complete``'s decision on the app's question, unless the app asks for
free text (``response_format: {"type": "text"}``) or its own choices (``guided_choice``,
``structured_outputs.choice``, a ``response_format`` JSON schema of fixed strings), which the
embedded engine scores (:mod:`app.services.fixed_answers`) and vLLM decodes itself.

What is read here is public: the prompt set is a DP output, the app's messages its own (they
are never stored or logged; errors name fields and limits, not content).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpsyn_client.chat import NoChatFormError, chat_messages
from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import ApiKey, PromptSet
from app.llm.base import LLMBackend
from app.llm.factory import BackendKind
from app.llm.generation import (
    TRANSCRIPT_STOPS,
    ChatMessage,
    Finished,
    Generated,
    GenerationParams,
    local_generate,
    transcript,
)
from app.llm.provider import BackendProvider
from app.llm.vllm_generate import VLLMGenerator
from app.llm.vllm_http import VLLMHttpBackend
from app.services.answer_forms import AnswerForm, AskedForm, Form, answer_form
from app.services.errors import ConflictError, InvalidError
from app.services.fixed_answers import chat_question, choice_answer, label_answer, question
from app.services.prompts import COMPLETE_RETRY, PromptSource, scoring_backend, soft_prompted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the engine (settings ``DPSYN_OPENAI_*``)."""

    max_tokens: int
    max_input_chars: int


@dataclass(frozen=True)
class Answer:
    """A prompt's answer to one request: its pieces of text, then :class:`Finished`."""

    prompt_id: str
    pieces: Generated


def prompt_json(row: PromptSet) -> dict[str, Any]:
    """What :func:`chat_messages` reads of a prompt set (its public JSON's fields)."""
    return {
        "id": row.id,
        "task_spec": dict(row.task),
        "demonstrations": list(row.demonstrations),
        "soft_prompt": row.soft_prompt_sha256 is not None,
    }


def decoding(
    limits: Limits,
    *,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    stop: Sequence[str],
    seed: int | None,
    logprobs: int | None = None,
    max_tokens_field: str = "max_tokens",
) -> GenerationParams:
    """The request's decoding, within the limits. A prompt answers a label or a value, so
    unset settings mean greedy decoding (what ``/complete`` does) and the cap's length.
    ``max_tokens_field`` is the field the app set it with (``max_completion_tokens`` too)."""
    if max_tokens is not None and max_tokens > limits.max_tokens:
        raise InvalidError(
            f"{max_tokens_field}: at most {limits.max_tokens} on this server "
            "(DPSYN_OPENAI_MAX_TOKENS)",
            code="max_tokens_too_large",
            param=max_tokens_field,
        )
    return GenerationParams(
        max_tokens=max_tokens or limits.max_tokens,
        temperature=0.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        stop=tuple(stop),
        seed=seed,
        logprobs=logprobs,
    )


def check_input(limits: Limits, texts: Sequence[str], param: str) -> None:
    """The app's text within :attr:`Limits.max_input_chars` (a 400 naming the limit)."""
    size = sum(len(text) for text in texts)
    if size > limits.max_input_chars:
        raise InvalidError(
            f"{param}: {size:,} characters, more than the {limits.max_input_chars:,} this "
            "server takes (DPSYN_OPENAI_MAX_INPUT_CHARS)",
            code="input_too_long",
            param=param,
        )


def chat(
    row: PromptSet,
    messages: Sequence[ChatMessage],
    params: GenerationParams,
    provider: BackendProvider,
    asked: AskedForm,
) -> Answer:
    """The prompt's chat messages, then the app's ``messages``, answered by the engine in
    the form the app asked for (a label by default for a classification prompt)."""
    source = PromptSource.from_row(row)
    form = answer_form(asked, source.task, provider.kind)
    if form.form is Form.LABEL:
        query = chat_question(source.task, messages)
        return _label(source, query, params, provider, form, spaced=False)
    conversation = _conversation(source, row, messages)
    if provider.kind is BackendKind.VLLM:
        if source.soft_prompt is not None:  # embeddings: the transcript, as a base model's
            stops = (*params.stop, *TRANSCRIPT_STOPS)
            params = params.model_copy(update={"stop": stops})
            return _vllm_soft(source, transcript(conversation), params, provider, form)
        return Answer(source.id, _vllm(provider).chat(conversation, params, form.constraint))
    backend = scoring_backend(source, provider, COMPLETE_RETRY, context="/v1/chat/completions")
    text, stops = _local_chat_text(provider.get(), conversation)
    if form.form is Form.CHOICE:  # a transcript writes a space before the answer
        prefix = " " if stops else ""
        answer = choice_answer(backend, text, form.choices, params, prefix=prefix, param=form.param)
        return Answer(source.id, answer)
    params = params.model_copy(update={"stop": (*params.stop, *stops)})
    return Answer(source.id, local_generate(backend, text, params))


def _conversation(
    source: PromptSource, row: PromptSet, messages: Sequence[ChatMessage]
) -> list[ChatMessage]:
    """The prompt's chat messages, then the app's. A soft prompt has no text
    demonstrations: its embeddings go in front, then the task's instruction and the app's
    messages."""
    if source.soft_prompt is not None:
        return [{"role": "system", "content": source.task.icl_instruction}, *messages]
    try:
        return [*chat_messages(prompt_json(row)), *messages]
    except NoChatFormError as err:  # a task spec without the fields a chat form needs
        raise ConflictError(str(err), code="no_chat_form") from None


def complete(
    row: PromptSet,
    prompt: str,
    params: GenerationParams,
    provider: BackendProvider,
    asked: AskedForm,
) -> Answer:
    """The prompt's text, then the app's ``prompt``, continued by the engine in the form the
    app asked for (a label by default for a classification prompt, after a space as the
    prompt's answer lines write it)."""
    source = PromptSource.from_row(row)
    form = answer_form(asked, source.task, provider.kind)
    if form.form is Form.LABEL:
        query = question(source.task, prompt, "prompt")
        return _label(source, query, params, provider, form, spaced=True)
    text = source.prompt + prompt
    if provider.kind is BackendKind.VLLM:
        if source.soft_prompt is not None:
            return _vllm_soft(source, text, params, provider, form)
        return Answer(source.id, _vllm(provider).complete(text, params, form.constraint))
    backend = scoring_backend(source, provider, COMPLETE_RETRY, context="/v1/completions")
    if form.form is Form.CHOICE:
        answer = choice_answer(backend, text, form.choices, params, prefix="", param=form.param)
        return Answer(source.id, answer)
    return Answer(source.id, local_generate(backend, text, params))


def _label(
    source: PromptSource,
    query: str,
    params: GenerationParams,
    provider: BackendProvider,
    form: AnswerForm,
    *,
    spaced: bool,
) -> Answer:
    """The prompt's label for ``query``: ``/complete``'s decision, on either engine."""
    backend = scoring_backend(source, provider, COMPLETE_RETRY, context="/v1 label answer")
    answer = label_answer(source, backend, query, params, calibrated=form.calibrated, spaced=spaced)
    return Answer(source.id, answer)


def _vllm_soft(
    source: PromptSource,
    text: str,
    params: GenerationParams,
    provider: BackendProvider,
    form: AnswerForm,
) -> Answer:
    """``text`` after the soft prompt, answered by vLLM from prompt embeddings; the refusals
    (another model, no embedding table) before anything is sent."""
    model = soft_prompted(source, source.soft_prompt, provider)  # type: ignore[arg-type]
    assert isinstance(model, VLLMHttpBackend)
    generator = _vllm(provider)
    return Answer(source.id, generator.complete(model.text_prompt(text), params, form.constraint))


def _local_chat_text(
    model: LLMBackend, messages: Sequence[ChatMessage]
) -> tuple[str, tuple[str, ...]]:
    """The conversation as the local model's text: its chat template where its tokenizer
    has one, else a transcript (which stops at the next turn)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True
        )
        return str(text), ()
    return transcript(messages), TRANSCRIPT_STOPS


_GENERATORS: dict[tuple[str, str], VLLMGenerator] = {}


def _vllm(provider: BackendProvider) -> VLLMGenerator:
    """This process's generator for the provider's vLLM server (one HTTP client each)."""
    model = provider.get().name
    key = (provider.url or "", model)
    if key not in _GENERATORS:
        _GENERATORS[key] = VLLMGenerator(provider.url or "", model)
    return _GENERATORS[key]


def record_usage(sessions: sessionmaker[Session], key_id: str, finished: Finished) -> None:
    """Add one answer's request and tokens to its key's usage. A database that cannot take
    the write loses this count (logged), never the app's answer."""
    try:
        with sessions.begin() as session:
            session.execute(
                update(ApiKey)
                .where(ApiKey.id == key_id)
                .values(
                    usage_requests=ApiKey.usage_requests + 1,
                    usage_prompt_tokens=ApiKey.usage_prompt_tokens + finished.prompt_tokens,
                    usage_completion_tokens=ApiKey.usage_completion_tokens
                    + finished.completion_tokens,
                )
            )
    except SQLAlchemyError as err:
        log.warning("usage of key %s not counted: %s", key_id, type(err).__name__)
