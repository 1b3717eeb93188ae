"""The OpenAI-compatible endpoint's bodies (``app.api.routes.openai``): the subset of OpenAI's
chat and text completion requests that the service answers, and their answers.

A field this subset does not carry out is refused by name (400) rather than ignored, except
those that change nothing here (``user``; ``n`` and the penalties at their defaults): an app
that asks for tools or several choices learns at once that it gets none. The answer's form
(``response_format``, vLLM's ``guided_choice`` and ``structured_outputs``, dpsyn's
``calibrated``) is read by :mod:`app.services.answer_forms`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from app.documented import Documented
from app.services.answer_forms import MAX_CHOICES, AskedForm
from app.services.errors import InvalidError

Role = Literal["system", "user", "assistant", "developer"]


#: One stop string: the schema says what the validation checks (schemathesis sent ``[""]``).
StopString = Annotated[str, Field(min_length=1)]


class JsonSchemaFormat(Documented):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    """The embedded engine takes an enum of strings, or an object of one required property
    that is one; vLLM takes any schema."""
    strict: bool | None = None


class ResponseFormat(Documented):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    """text: free text, also for a classification prompt; json_object: vLLM only."""
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is given exactly when type is 'json_schema'")
        return self


class _OpenAIRequest(Documented):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=200)
    """A prompt ID (or its name)."""
    max_tokens: int | None = Field(None, ge=1)
    """At most DPSYN_OPENAI_MAX_TOKENS."""
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    """Default 0 (greedy)."""
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: StopString | Annotated[list[StopString], Field(max_length=4)] | None = None
    """Up to 4 stop strings, none empty."""
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
    response_format: ResponseFormat | None = None
    """Default for a classification prompt: one of its labels; {"type": "text"}: free text."""
    guided_choice: list[str] | None = Field(None, min_length=1, max_length=MAX_CHOICES)
    """vLLM's: the answer is one of these strings."""
    structured_outputs: dict[str, Any] | None = None
    """vLLM's structured outputs, sent to vLLM as they are; the embedded engine takes
    {"choice": [...]} only."""
    calibrated: bool = False
    """dpsyn's: the label answer by contextually calibrated scores (as /complete's)."""

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> list[str]:
        return [value] if isinstance(value, str) else list(value or [])

    def stops(self) -> list[str]:
        return list(self.stop or [])

    def usage_in_stream(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def asked_form(self) -> AskedForm:
        """The fields that choose the answer's form, as vLLM would read them."""
        response_format = None
        if self.response_format is not None:
            response_format = self.response_format.model_dump(by_alias=True, exclude_none=True)
        return AskedForm(
            response_format=response_format,
            guided_choice=self.guided_choice,
            structured_outputs=self.structured_outputs,
            calibrated=self.calibrated,
        )


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
    logprobs: bool | None = None
    """Each answer token's log-probability (a label answer: the label's)."""
    top_logprobs: int | None = Field(None, ge=0, le=20)
    """With logprobs: this many alternatives per token (a label answer: the other labels)."""

    def logprobs_asked(self) -> int | None:
        """How many alternatives per token the app asked for (None: no log-probabilities)."""
        if not self.logprobs:
            if self.top_logprobs is not None:
                raise InvalidError(
                    "top_logprobs: needs logprobs: true",
                    code="logprobs_not_asked",
                    param="top_logprobs",
                )
            return None
        return self.top_logprobs or 0


class CompletionRequest(_OpenAIRequest):
    prompt: str
    """Text appended to the DP prompt's text, then continued."""
    logprobs: int | None = Field(None, ge=0, le=20)
    """Each answer token's log-probability and this many alternatives' (a label answer: the
    label's, and the other labels')."""

    def logprobs_asked(self) -> int | None:
        return self.logprobs


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
