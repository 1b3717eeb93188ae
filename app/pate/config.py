"""Validated settings of one PromptPATE job (Duan et al. 2023), and its error type.

Defaults follow the paper where it states them (one private example per teacher prompt, a
student prompt of a few labelled public examples) and are otherwise sized for the packaged
CPU model: 100 teachers and 100 answered queries keep a job to minutes. Every field is public:
nothing here is derived from the private data (``public_counts`` is the data owner's
declaration, set from :class:`app.methods.base.Counts`, never by a client).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from app.method_settings import MethodSettings, PositiveFinite, Share
from app.privacy.accounting import Accounting
from app.results import SynthesisError


class PateError(SynthesisError):
    """A PromptPATE job cannot run as asked; the message names counts and settings only.

    A :class:`SynthesisError`, so the CLI and the job runner report it as the user's problem.
    """


class PateConfig(MethodSettings):
    """What a PromptPATE job does and under which budget.

    The noise of Confident-GNMax is calibrated to ``epsilon`` unless both
    ``sigma_threshold`` and ``sigma_gnmax`` are given, in which case the filter budget alone
    is calibrated and the noise is what the user chose.
    """

    accounting: Accounting = Accounting.TIGHT
    """tight: add/remove neighbours; paper: replace-one (sensitivities double)."""
    teachers: int = Field(100, ge=1, le=10_000)
    """Ensemble size E: disjoint teacher prompts."""
    shots: int = Field(1, ge=1, le=32)
    """Private examples per teacher prompt; a teacher with fewer abstains."""
    queries: int = Field(100, ge=1, le=1_000_000)
    """Answered queries the noise is sized for (when sigmas are calibrated)."""
    max_public: int = Field(1000, ge=1, le=1_000_000)
    """Public inputs processed at most."""
    threshold_fraction: Share = 0.6
    """Confident-GNMax threshold as a fraction of the teachers (in votes)."""
    sigma_ratio: PositiveFinite = 2.0
    """sigma_threshold / sigma_gnmax when the noise is calibrated."""
    sigma_threshold: float | None = Field(None, gt=0.0, allow_inf_nan=False)
    """Explicit noise std (votes) of the threshold check; with sigma_gnmax."""
    sigma_gnmax: float | None = Field(None, gt=0.0, allow_inf_nan=False)
    """Explicit noise std (votes) of the GNMax release; with sigma_threshold."""
    student_shots: int = Field(4, ge=1, le=64)
    """Labelled public examples in the student prompt."""
    candidates: int = Field(16, ge=1, le=1000)
    """Random student prompts scored on the holdout."""
    holdout_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    """Share of the labelled public examples kept to score the candidates."""
    max_chars: int = Field(600, ge=16, le=100_000)
    """Public inputs are cut at a word boundary to this many characters."""
    group_size: int = Field(32, ge=1, le=4096)
    """Public inputs per group of backend calls; the unit of progress."""
    public_counts: bool = False
    """The data owner declares the record count public: a job whose records cannot fill one
    teacher prompt is refused at planning. Otherwise nothing is planned from the count
    (teachers short of records abstain, and the noisy threshold check rejects what too few
    teachers agree on)."""

    @model_validator(mode="after")
    def _sigmas_together(self) -> PateConfig:
        # One explicit sigma and one calibrated would make the ratio ambiguous.
        if (self.sigma_threshold is None) != (self.sigma_gnmax is None):
            raise ValueError(
                "sigma_threshold and sigma_gnmax must be given together (or neither, to "
                "calibrate both to epsilon)"
            )
        return self
