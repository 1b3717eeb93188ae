"""Prompt bodies: the prompt views (text and chat messages), validation, /complete."""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from fastapi import Query
from pydantic import (
    Field,
    model_validator,
)

from app.api.schemas.common import Timestamp, _Request
from app.db.models import (
    PromptSet,
)
from app.documented import Documented
from app.methods.base import DemonstrationCount

# --- prompts --------------------------------------------------------------------------------


class DemonstrationPublic(Documented):
    label: str
    text: str


class SoftPromptPublic(Documented):
    """A PromptDPSGD soft prompt: ``length`` input embeddings of ``hidden`` values, trained
    for ``model`` (``/complete`` refuses it on a server running another model)."""

    model: str
    length: int
    """Number of soft tokens (rows of the embedding matrix)."""
    hidden: int
    """The model's hidden size (columns)."""
    sha256: str
    """SHA-256 of the safetensors file the download returns."""
    download_url: str
    """Path of the safetensors file (same key)."""

    @classmethod
    def from_row(cls, row: PromptSet) -> SoftPromptPublic | None:
        # Reads the metadata columns only: the bytes are a deferred column, never loaded here.
        if row.soft_prompt_sha256 is None:
            return None
        assert row.soft_prompt_length is not None and row.soft_prompt_hidden is not None
        return cls(
            model=row.model,
            length=row.soft_prompt_length,
            hidden=row.soft_prompt_hidden,
            sha256=row.soft_prompt_sha256,
            download_url=f"/v1/prompts/{row.id}/soft-prompt",
        )


class PromptSummary(Documented):
    id: str
    job_id: str
    dataset_id: str
    task: str
    method: str
    model: str
    epsilon: float
    delta: float
    created_at: Timestamp
    soft_prompt: SoftPromptPublic | None
    """promptdpsgd: the trained soft prompt's metadata and download path; null for prompts made
    of demonstrations."""
    dataset_name: str | None = None
    """The name of the dataset it was synthesised from (public metadata)."""
    validation_accuracy: float | None = None
    """Its accuracy on its job's validation set (null: none named, pending or not scored); the
    prompt's validation has the baselines."""
    beats_zero_shot: bool | None = None
    """Whether that accuracy is above zero-shot's on the same records (null: no score, or scored
    before baselines were kept)."""

    @classmethod
    def from_row(cls, row: PromptSet, dataset_name: str | None = None) -> PromptSummary:
        scored = row.validation or {}
        accuracy = scored.get("accuracy")
        zero = (scored.get("baselines") or {}).get("zero_shot")
        return cls(
            validation_accuracy=accuracy,
            beats_zero_shot=None if accuracy is None or zero is None else accuracy > zero,
            id=row.id,
            job_id=row.job_id,
            dataset_id=row.dataset_id,
            dataset_name=dataset_name,
            task=str(row.task.get("name", "")),
            method=row.method,
            model=row.model,
            epsilon=row.epsilon,
            delta=row.delta,
            created_at=row.created_at,
            soft_prompt=SoftPromptPublic.from_row(row),
        )


class ValidationBaselines(Documented):
    """What a prompt must beat on its validation records: public inputs only, no cost."""

    zero_shot: float
    """Accuracy of the instruction alone (no demonstrations, plain model)."""
    majority: float | None = None
    """Accuracy of always answering the most frequent label (classification)."""
    majority_label: str | None = None
    """That label."""
    zero_shot_calibrated: float | None = None
    """Zero-shot with contextual calibration (classification)."""

    def calibrated(self) -> ValidationBaselines | None:
        """The baselines a calibrated accuracy is held to (the majority label needs none)."""
        if self.zero_shot_calibrated is None:
            return None
        return self.model_copy(update={"zero_shot": self.zero_shot_calibrated})


def validation_verdict(
    accuracy: float, baselines: ValidationBaselines, n: int | None = None
) -> str:
    """The prompt's score against its baselines, in plain words (the API, the CLI and the
    dashboard say the same). With ``n``, the records scored, a lead within two standard
    errors of the accuracy (binomial over the records) is "cannot tell", with the number of
    records that would tell a lead of that size ("beats ... (+0.021)" was said of
    one record's difference out of 48)."""
    best = max(baselines.zero_shot, baselines.majority or 0.0)
    name = "zero-shot" if best == baselines.zero_shot else "the majority label"
    lead = accuracy - best
    if lead > 0 and n:
        variance = max(accuracy * (1.0 - accuracy), 1.0 / n)
        margin = 2.0 * math.sqrt(variance / n)
        if lead <= margin:
            needed = math.ceil(4.0 * variance / lead**2)
            return (
                f"cannot tell on {n} records: ahead of {name} by {lead:+.3f}, within the "
                f"±{margin:.3f} that {n} records allow; about {needed} records would tell a "
                "lead of this size"
            )
    if lead > 0:
        return f"beats zero-shot and the majority label (by {lead:+.3f} over {name})"
    if accuracy < baselines.zero_shot:
        return (
            f"does not beat zero-shot ({accuracy:.3f} against {baselines.zero_shot:.3f}): the "
            "instruction alone answers these records better than this prompt"
        )
    return f"does not beat {name} ({accuracy:.3f} against {best:.3f})"


class ValidationPublic(Documented):
    """The prompt's score on its job's validation set (public labelled records, scored after
    the prompt was stored; post-processing, never charged)."""

    dataset_id: str
    """The public labelled dataset it was scored on."""
    status: Literal["pending", "scored", "not_scored"]
    """pending: stored, not scored yet (the next read may have the score); scored: n and
    accuracy; not_scored: reason."""
    n: int | None = None
    """Records scored (at most VALIDATION_MAX_RECORDS)."""
    accuracy: float | None = None
    """Share of them answered right, by the scorer /complete answers with."""
    calibrated_accuracy: float | None = None
    """Classification: the same with contextual calibration, as /complete answers with
    calibrated=true (null: scored before it was kept)."""
    reason: str | None = None
    """Why it was not scored (names no record)."""
    baselines: ValidationBaselines | None = None
    """What the prompt must beat on the same records (null: not scored, or scored before
    baselines were kept)."""
    verdict: str | None = None
    """The score against the baselines in plain words, e.g. that the prompt does not beat
    zero-shot (null when there are no baselines)."""
    calibrated_verdict: str | None = None
    """The calibrated accuracy against calibrated zero-shot and the majority label, in the same
    words (null without both)."""

    @model_validator(mode="after")
    def _say_it(self) -> ValidationPublic:
        if self.verdict is None and self.baselines is not None and self.accuracy is not None:
            self.verdict = validation_verdict(self.accuracy, self.baselines, self.n)
        calibrated = self.baselines.calibrated() if self.baselines is not None else None
        if self.calibrated_verdict is None and calibrated and self.calibrated_accuracy is not None:
            self.calibrated_verdict = validation_verdict(
                self.calibrated_accuracy, calibrated, self.n
            )
        return self


class PromptPublic(PromptSummary):
    """A synthesised prompt: a differentially private output, safe to share."""

    task_spec: dict[str, Any]
    demonstrations: list[DemonstrationPublic]
    prompt: str
    validation: ValidationPublic | None = None
    """Its score on the job's validation set; null if the job named none."""
    notes: list[str] = Field(default_factory=list)
    """Plain sentences on how the prompt differs from what its job planned, e.g. demonstrations
    that came out empty and were left out, and labels it then does not demonstrate; functions
    of DP outputs and public settings only. Empty: nothing to note."""
    demonstrations_requested: int | None = None
    """The demonstrations its job was asked for (its shots); null for a method that plans
    none (promptpate chooses public texts, promptdpsgd trains vectors)."""
    demonstrations_served: int | None = None
    """The demonstrations it serves (those in ``demonstrations``); fewer than requested when
    some failed the text checks and were left out (demonstrations_dropped says why)."""
    demonstrations_dropped: dict[str, int] = Field(default_factory=dict)
    """The demonstrations left out, by reason: empty (only whitespace), label_echo (only a
    label's name), too_short (fewer than the job's min_words words). Its privacy cost is that
    of all requested: one left out is not generated again (docs/synthesis.md)."""

    @classmethod
    def from_row(
        cls,
        row: PromptSet,
        dataset_name: str | None = None,
        notes: Sequence[str] = (),
        count: DemonstrationCount | None = None,
    ) -> PromptPublic:
        """``notes`` and ``count``: :func:`app.services.prompts.prompt_notes` and
        :func:`app.services.prompts.demonstration_count` of the row."""
        return cls(
            **dict(PromptSummary.from_row(row, dataset_name)),
            task_spec=dict(row.task),
            demonstrations=[DemonstrationPublic(**d) for d in row.demonstrations],
            prompt=row.prompt,
            validation=ValidationPublic(**row.validation) if row.validation else None,
            notes=list(notes),
            demonstrations_requested=count.requested if count else None,
            demonstrations_served=count.served if count else None,
            demonstrations_dropped=dict(count.dropped) if count else {},
        )


class PromptFormat(StrEnum):
    """How ``GET /v1/prompts/{id}`` answers: the prompt's JSON, or its chat messages."""

    TEXT = "text"
    MESSAGES = "messages"


PromptFormatQuery = Annotated[
    PromptFormat,
    Query(
        alias="format",
        description="text (default): the prompt's JSON, its text in `prompt`. messages: the "
        "prompt as chat messages for OpenAI-compatible chat APIs (the ICL instruction as the "
        "system message, each demonstration as a user turn answered by an assistant turn); "
        "a soft prompt (promptdpsgd) has none: 409 no_chat_form.",
    ),
]


class ChatMessagePublic(Documented):
    role: Literal["system", "user", "assistant"]
    content: str


class PromptMessagesPublic(Documented):
    """A prompt as chat messages (``?format=messages``): append the user's query as a last
    ``user`` message, in the demonstrations' form (``{text_field}: {query}``), and send them
    to a chat model; its reply is the label's word (or the extracted value)."""

    prompt_id: str
    messages: list[ChatMessagePublic]


class CompletionRequest(_Request):
    stored: ClassVar[bool] = False
    query: str = Field(min_length=1, max_length=20_000)
    """Never stored or logged."""
    calibrated: bool = False
    """Classification: divide the label scores by the prompt's scores for content-free inputs
    ('N/A', '', '[MASK]') and renormalise (contextual calibration, no privacy cost). Often
    much better on a small model; a 422 for extraction."""


class CompletionPublic(Documented):
    """Classification: ``label`` and ``scores`` (a distribution over the labels), and
    ``calibration`` saying whether they were calibrated. Extraction: ``value``."""

    prompt_id: str
    kind: str
    label: str | None = None
    scores: dict[str, float] | None = None
    calibration: str | None = None
    """Classification: 'contextual' (calibrated) or 'none'."""
    value: str | None = None
