"""The OpenAI-compatible endpoint's bodies (``app.api.routes.openai``): the subset of OpenAI's
chat and text completion requests that the service answers, and their answers.

A field this subset does not carry out is refused by name (400) rather than ignored, except
those that change nothing here (``user``; ``n``, the penalties and ``logprobs`` at their
defaults): an app that asks for tools or several choices learns at once that it gets none.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from app.documented import Documented

Role = Literal["system", "user", "assistant", "developer"]


class _OpenAIRequest(Documented):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=200)
    """A prompt ID (or its name)."""
    max_tokens: int | None = Field(None, ge=1)
    """At most DPSYN_OPENAI_MAX_TOKENS."""
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    """Default 0 (greedy)."""
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    """Up to 4 stop strings."""
    stream: bool = False
    stream_options: dict[str, bool] | None = None
    seed: int | None = None
    n: Literal[1] = 1
    """One choice per request."""
    user: str | None = Field(None, max_length=256)
    """Accepted and not used."""
    presence_penalty: float | None = Field(None, ge=0.0, le=0.0)
    """0 only."""
    frequency_penalty: float | None = Field(None, ge=0.0, le=0.0)
    """0 only."""
    logprobs: Literal[False] | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> list[str]:
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4 or any(not stop for stop in stops):
            raise ValueError("at most 4 stop strings, none empty")
        return stops

    def stops(self) -> list[str]:
        return list(self.stop or [])

    def usage_in_stream(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ContentPart(Documented):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessageIn(Documented):
    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str | list[ContentPart]
    name: str | None = Field(None, max_length=64)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def message(self) -> dict[str, str]:
        """As a chat message (``developer`` is OpenAI's newer name for ``system``)."""
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": self.text()}


class ChatCompletionRequest(_OpenAIRequest):
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=256)
    max_completion_tokens: int | None = Field(None, ge=1)
    """As max_tokens."""


class CompletionRequest(_OpenAIRequest):
    prompt: str
    """Text appended to the DP prompt's text, then continued."""


class Usage(Documented):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ModelCard(Documented):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    """'dpsyn': a DP prompt set of the key's tenant."""


class ModelList(Documented):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ChatCompletion(Documented):
    """OpenAI's ``chat.completion`` (and, for ``/v1/completions``, ``text_completion``)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: Usage
