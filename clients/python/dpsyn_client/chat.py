"""A synthesised prompt as chat messages, the form OpenAI-compatible chat APIs take.

The one rendering of a prompt for chat models: ``GET /v1/prompts/{id}?format=messages`` and
the downstream client (:mod:`dpsyn_client.client`) both call :func:`chat_messages`, so an app that
renders locally from a cached prompt sends exactly what the API would have answered. It works
on the prompt's public JSON (``GET /v1/prompts/{id}``'s body, a DP output), and imports nothing
of the project, so the client loads neither the web app nor the database.

The messages follow the text prompt (the server's ``app.synthesis.prompts``) turn for turn:
the task's ICL instruction is the system message; each demonstration is a user turn (``{text_field}:
{text}``, the text on one line) answered by an assistant turn (the label's verbaliser word,
the answer ``/complete`` scores; an extraction's slot value as is). A query, when given, is
the last user turn, in the demonstrations' form, so the model's reply is the answer.

A PromptDPSGD prompt is a soft prompt: trained embeddings, no text demonstrations. It has no
chat form (a chat API takes text, not embeddings), so it raises :class:`NoChatFormError`
rather than render an instruction with no demonstrations, which would silently be zero-shot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: One chat message: ``{"role": "system" | "user" | "assistant", "content": text}``.
ChatMessage = dict[str, str]


class NoChatFormError(ValueError):
    """The prompt cannot be written as chat messages (a soft prompt); the message says why."""


def _one_line(text: str) -> str:
    """Whitespace runs as one space, as the text prompt writes every field."""
    return " ".join(str(text).split())


def _spec_text(spec: Mapping[str, Any], name: str) -> str:
    value = spec.get(name)
    if not isinstance(value, str) or not value.strip():
        raise NoChatFormError(f"the prompt's task spec has no {name}: it has no chat form")
    return value


def chat_messages(prompt: Mapping[str, Any], query: str | None = None) -> list[ChatMessage]:
    """The prompt ``prompt`` (the API's prompt JSON) as chat messages, ``query`` last if given.

    Raises :class:`NoChatFormError` for a soft prompt (PromptDPSGD), which is embeddings."""
    if prompt.get("soft_prompt"):
        prompt_id = prompt.get("id")
        raise NoChatFormError(
            f"prompt {prompt_id!r} is a soft prompt (promptdpsgd): trained embeddings the "
            "model reads before each input, not text demonstrations, so it has no chat "
            f"messages form; answer queries with it through POST /v1/prompts/{prompt_id}/complete"
        )
    spec: Mapping[str, Any] = prompt.get("task_spec") or {}
    text_field = _spec_text(spec, "text_field")
    words: Mapping[str, str] = spec.get("verbalisers") or {}
    messages: list[ChatMessage] = [
        {"role": "system", "content": _spec_text(spec, "icl_instruction")}
    ]
    for demo in prompt.get("demonstrations") or []:
        label = str(demo["label"])
        messages.append({"role": "user", "content": f"{text_field}: {_one_line(demo['text'])}"})
        messages.append({"role": "assistant", "content": words.get(label, label)})
    if query is not None:
        if not query.strip():
            raise ValueError("the query is empty: give the text to classify or extract from")
        messages.append({"role": "user", "content": f"{text_field}: {_one_line(query)}"})
    return messages
