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
from app.eval.verdict import Outcome, Verdict, binomial_se, verdict
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
    validation_outcome: Outcome | None = None
    """The validation verdict in one word (the prompt's ``validation.outcome``): ahead of both
    zero-shot and the majority label by more than two standard errors over the records scored
    (about 95 %), behind the better of them by more than that, or cannot_tell (within it);
    null: no score, or scored before baselines were kept."""
    beats_zero_shot: bool | None = None
    """True only when ``validation_outcome`` is ahead; false when it is behind or cannot_tell
    (a lead within the records' noise is no win: filter on this and such a prompt is not
    taken); null as ``validation_outcome``."""

    @classmethod
    def from_row(cls, row: PromptSet, dataset_name: str | None = None) -> PromptSummary:
        outcome = _outcome_of(row.validation or {})
        return cls(
            validation_accuracy=(row.validation or {}).get("accuracy"),
            validation_outcome=outcome,
            beats_zero_shot=None if outcome is None else outcome is Outcome.AHEAD,
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


def _outcome_of(scored: dict[str, Any]) -> Outcome | None:
    """The outcome of a stored validation (the same as its ``ValidationPublic.outcome``)."""
    accuracy, baselines = scored.get("accuracy"), scored.get("baselines")
    if accuracy is None or not baselines:
        return None
    return validation_outcome(accuracy, ValidationBaselines(**baselines), scored.get("n"))


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


def _against_the_better(
    accuracy: float, baselines: ValidationBaselines, n: int | None
) -> tuple[Verdict, str]:
    """The verdict (:func:`app.eval.verdict.verdict`) against the better baseline, and its
    name: a prompt must beat both zero-shot and the majority label."""
    best = max(baselines.zero_shot, baselines.majority or 0.0)
    name = "zero-shot" if best == baselines.zero_shot else "the majority label"
    return verdict(accuracy, best, binomial_se(accuracy, n) if n else None), name


def validation_outcome(accuracy: float, baselines: ValidationBaselines, n: int | None) -> Outcome:
    """The verdict of :func:`validation_verdict` in one word (the API's tri-state fields)."""
    return _against_the_better(accuracy, baselines, n)[0].outcome


def validation_verdict(accuracy: float, baselines: ValidationBaselines, n: int | None) -> str:
    """The prompt's score against its baselines, in plain words (the API, the CLI and the
    dashboard say the same). Against the better of zero-shot and the majority label, at two
    standard errors of the accuracy over the ``n`` records scored (binomial; about 95 %): a
    lead or a deficit within that margin is "cannot tell", with the number of records that
    would tell a difference of that size ("beats ... (+0.021)" was said of one record's
    difference out of 48, and "does not beat zero-shot (0.396 against 0.458)" of three)."""
    judged, name = _against_the_better(accuracy, baselines, n)
    if judged.outcome is Outcome.CANNOT_TELL:
        return _cannot_tell(judged, name, n)
    beyond = f"beyond the ±{judged.margin:.3f} that {n} records allow"
    if judged.outcome is Outcome.AHEAD:
        both = "zero-shot and the majority label" if baselines.majority is not None else "zero-shot"
        return f"beats {both} (by {judged.lead:+.3f} over {name}, {beyond})"
    best = accuracy - judged.lead
    if name == "zero-shot":
        return (
            f"is behind zero-shot ({accuracy:.3f} against {best:.3f}, {beyond}): the "
            "instruction alone answers these records better than this prompt"
        )
    return f"is behind the majority label ({accuracy:.3f} against {best:.3f}, {beyond})"


def _cannot_tell(judged: Verdict, name: str, n: int | None) -> str:
    """The words for a difference the records cannot carry (or an unknown record count)."""
    if not n:
        return f"cannot tell: the number of records scored was not kept ({name} is the bar)"
    within = f"within the ±{judged.margin:.3f} that {n} records allow"
    factor = judged.factor()
    if factor is None:
        return f"cannot tell on {n} records: level with {name}, {within}"
    side, size = ("ahead of", "lead") if judged.lead > 0 else ("behind", "deficit")
    return (
        f"cannot tell on {n} records: {side} {name} by {judged.lead:+.3f}, {within}; about "
        f"{math.ceil(n * factor)} records would tell a {size} of this size"
    )


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
    """The score against the better of zero-shot and the majority label in plain words, at two
    standard errors over the n records (about 95 %): that it beats both, that it is behind,
    or that the records cannot tell (null when there are no baselines)."""
    outcome: Outcome | None = None
    """That verdict in one word: ahead (beyond the margin), behind (beyond it), cannot_tell
    (within it, either way); null when there are no baselines."""
    calibrated_verdict: str | None = None
    """The calibrated accuracy against calibrated zero-shot and the majority label, in the same
    words (null without both)."""
    calibrated_outcome: Outcome | None = None
    """That calibrated verdict in one word, as ``outcome``."""

    @model_validator(mode="after")
    def _say_it(self) -> ValidationPublic:
        """The verdicts and their outcomes, from one function so that they cannot disagree."""
        if self.baselines is not None and self.accuracy is not None:
            self.verdict = validation_verdict(self.accuracy, self.baselines, self.n)
            self.outcome = validation_outcome(self.accuracy, self.baselines, self.n)
        calibrated = self.baselines.calibrated() if self.baselines is not None else None
        if calibrated and self.calibrated_accuracy is not None:
            self.calibrated_verdict = validation_verdict(
                self.calibrated_accuracy, calibrated, self.n
            )
            self.calibrated_outcome = validation_outcome(
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
