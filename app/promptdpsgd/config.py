"""Validated settings of one PromptDPSGD job, and its error type.

Defaults are sized for the packaged CPU model (Gemma-3-270M on 2 cores): see
:mod:`app.promptdpsgd.train` for the measurements behind them. Every field is public:
nothing here is derived from the private data (``public_counts`` is the data owner's
declaration, set from :class:`app.methods.base.Counts`, never by a client).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from app.method_settings import MethodSettings
from app.privacy.accounting import Accounting
from app.results import SynthesisError


class PromptDpsgdError(SynthesisError):
    """A PromptDPSGD job cannot run as asked; the message names counts, settings and labels
    only. A :class:`SynthesisError`, so the CLI and the job runner report it as the user's
    problem."""


class SoftPromptInit(StrEnum):
    """Where the soft prompt starts (public choices, no data): the embeddings of the
    labels' verbaliser tokens, cycled to the prompt length (Lester et al. 2021 found class
    labels the best start), or of the task's instruction."""

    LABELS = "labels"
    INSTRUCTION = "instruction"


class PromptDpsgdConfig(MethodSettings):
    """What a PromptDPSGD job does and under which budget; the noise is calibrated to
    ``epsilon`` given ``steps`` and the sampling rate ``batch_size / n``, with ``n`` the
    records counted under DP (or declared public)."""

    accounting: Accounting = Accounting.TIGHT
    """tight: add/remove neighbours, Poisson batches; paper: replace-one, fixed-size batches (the
    clipped sum's sensitivity doubles)."""
    prompt_length: int = Field(8, ge=1, le=64)
    """Soft prompt tokens (trainable)."""
    steps: int = Field(60, ge=1, le=10_000)
    """DP-SGD steps."""
    batch_size: int = Field(16, ge=1, le=4096)
    """Expected batch size; the sampling rate is batch_size / private records."""
    learning_rate: float = Field(0.03, gt=0.0, le=10.0, allow_inf_nan=False)
    """Adam learning rate."""
    clip_norm: float = Field(0.1, gt=0.0, le=1e6, allow_inf_nan=False)
    """Per-example gradient clipping norm C (L2)."""
    init: SoftPromptInit = SoftPromptInit.LABELS
    """Start: label word or instruction embeddings."""
    public_counts: bool = False
    """The data owner declares the record count public: the job samples at batch_size / the exact
    count and releases none. Otherwise it releases the count under DP at a share of its budget
    (docs/privacy.md). Paper accounting needs it (fixed-size batches are drawn from a known
    number of records)."""
