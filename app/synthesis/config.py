"""Validated settings of one synthesis job, with the papers' defaults per task."""

from __future__ import annotations

import math

from pydantic import ConfigDict, Field, field_validator

from app.documented import Documented
from app.privacy.accounting import Accounting
from app.privacy.params import AdaDPSynVariant, Aggregator
from app.privacy.unit import DEFAULT_DELTA

# M, N, T_max from the AdaDPSyn paper's Tables 12-17 (K = 100, 4 shots everywhere).
TASK_DEFAULTS: dict[str, dict[str, int]] = {
    "agnews": {"M": 10, "N": 2, "tmax": 100},
    "trec": {"M": 20, "N": 2, "tmax": 15},
    "trec14": {"M": 10, "N": 2, "tmax": 15},
    "sst2": {"M": 10, "N": 2, "tmax": 30},
    "mitg": {"M": 40, "N": 1, "tmax": 20},
    "mitd": {"M": 40, "N": 1, "tmax": 20},
}
# Any other task (a custom one): middle-of-the-road values, printed when a run starts.
GENERIC_DEFAULTS = {"M": 10, "N": 2, "tmax": 30}
DEFAULT_K = 100
#: A demonstration needs this many words to be served (one word, "The", teaches nothing).
DEFAULT_MIN_WORDS = 2
DEFAULT_SHOTS = 4
#: A task with at most this many labels gets one shot per label by default (at least
#: DEFAULT_SHOTS), so that its prompt shows every label: 4 shots of TREC's 6 labels left two
#: unseen, and the model answered those with the labels it had seen. Above it, a
#: prompt of one shot per label grows long for a small model's context, and the CLI says how
#: many labels the shots cover.
COVER_EVERY_LABEL_UP_TO = 8


def default_shots(labels: int) -> int:
    """The shots a job gets when it names none: one per label for a task of at most
    :data:`COVER_EVERY_LABEL_UP_TO` labels, at least :data:`DEFAULT_SHOTS`. ``labels``: the
    task's label count (0 for extraction). Public: the task's labels are public."""
    return max(DEFAULT_SHOTS, labels) if labels <= COVER_EVERY_LABEL_UP_TO else DEFAULT_SHOTS


class SynthesisConfig(Documented):
    """What a job generates and under which budget.

    ``epsilon`` is the target; the free noise multiplier (sigma for Tang et al., sigma1 for
    AdaDPSyn) is calibrated to it. Two baselines of the papers: ``epsilon = 0`` generates from
    the instruction alone (no private data, no cost) and ``epsilon = inf`` runs without noise
    (no privacy at all).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The aggregator; named ``method`` because that is its key in stored configs and results
    # (and the token loop is registered under the aggregator's name).
    method: Aggregator = Aggregator.ADADPSYN
    epsilon: float = Field(ge=0.0)
    """Target epsilon; 0 and inf are baselines."""
    delta: float | None = Field(
        None, gt=0.0, lt=1.0, description=f"Default: {DEFAULT_DELTA:g} (public, never 1/|D|)."
    )
    accounting: Accounting = Accounting.TIGHT
    public_counts: bool = False
    """The data owner declares the per-label record counts public: the job plans with the exact
    counts and releases none. Otherwise it plans with counts released under DP at a share of
    its budget (docs/privacy.md). Paper accounting needs it (fixed-size sampling draws from a
    known number of records)."""
    shots: int = Field(DEFAULT_SHOTS, ge=1, le=64)
    M: int = Field(ge=1, le=200)
    N: int = Field(ge=1, le=50)
    tmax: int = Field(ge=1, le=512)
    K: int = Field(DEFAULT_K, ge=2, le=1000)
    """Public vocabulary size per step."""
    min_words: int = Field(DEFAULT_MIN_WORDS, ge=1, le=50)
    """A demonstration of fewer words is left out of the prompt and noted, as is one that only
    repeats a label's name (post-processing, no privacy cost)."""
    variant: AdaDPSynVariant = AdaDPSynVariant.POOLED
    """AdaDPSyn only: 'pooled' (default) or 'paper' (Algorithm 1 as published)."""
    # AdaDPSyn constants; None takes the variant's row for M (app.privacy.params).
    sigma0: float | None = Field(None, gt=0.0)
    sigma2: float | None = Field(None, gt=0.0)
    T: int | None = Field(None, ge=0, le=20)
    lam: float | None = Field(None, ge=0.0, le=10.0)
    seed: int | None = None
    """Tests and studies only: voids the guarantee."""

    @field_validator("epsilon")
    @classmethod
    def _not_nan(cls, value: float) -> float:
        if math.isnan(value):
            raise ValueError("epsilon must be a number")
        return value

    @classmethod
    def for_task(cls, task_name: str, **overrides: object) -> SynthesisConfig:
        """The config with the paper's M, N, T_max for ``task_name`` unless overridden."""
        defaults: dict[str, object] = dict(TASK_DEFAULTS.get(task_name, GENERIC_DEFAULTS))
        defaults.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(defaults)
