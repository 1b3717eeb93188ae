"""The token loop's privacy: its aggregator's parameters, the accountant, and the loop's shape.

:class:`SynthesisPrivacy` is the one object the token loop (``app.synthesis``) and the ledger
share, as :class:`~app.privacy.pate.PatePrivacy` is PromptPATE's. From it come the sampling
of every token step (:meth:`SynthesisPrivacy.sampling`), the event that describes a job
(:meth:`SynthesisPrivacy.synthesis_event`) and its price (:meth:`SynthesisPrivacy.epsilon`).
A job row stores it under the key ``plan`` (the name it had; stored JSON keeps its keys).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from app.documented import Documented
from app.privacy.accounting import Accountant, Accounting, accountant_for, sampling_for
from app.privacy.events import GaussianEvent, LabelEvent, SampledEvent, SynthesisEvent
from app.privacy.params import AdaDPSynParams, Aggregator, AggregatorParams, TangParams
from app.privacy.sampling import Sampling


class SynthesisPrivacy(Documented):
    """Everything that determines the privacy cost of a token-loop job (not a plan: the job's
    plan, :class:`app.synthesis.generator.SynthesisPlan`, holds one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    params: AggregatorParams
    accounting: Accounting = Accounting.TIGHT
    M: int = Field(ge=1, le=1000)
    """Teacher subsets per token step."""
    N: int = Field(ge=1, le=100)
    """Records per teacher subset (expected, if Poisson)."""
    tmax: int = Field(ge=1, le=1000)
    """Maximum tokens per demonstration."""
    count_sigma: float | None = Field(None, gt=0.0)
    """Jobs planned before the dataset-level count release: the noise multiplier of the job's own
    release of each label's count, priced in its event; None: the counts are public or
    released once for the dataset (app.privacy.unit)."""
    label_params: dict[str, AggregatorParams] = Field(default_factory=dict)
    """Each label's own aggregator parameters, calibrated to its own released size (one record
    touches one label's partition, so each label can be held to the job's epsilon alone); a
    label not here runs with ``params``."""

    @model_validator(mode="after")
    def _aggregator_params(self) -> SynthesisPrivacy:
        kind = type(self.params)
        if not isinstance(self.params, TangParams | AdaDPSynParams):
            raise ValueError("params must be TangParams or AdaDPSynParams")
        if any(type(p) is not kind for p in self.label_params.values()):
            raise ValueError("every label's params must be of the job's aggregator")
        return self

    def params_for(self, label: str) -> AggregatorParams:
        """The aggregator parameters the rounds of ``label`` run with."""
        return self.label_params.get(label, self.params)

    @property
    def aggregator(self) -> Aggregator:
        return Aggregator.TANG if isinstance(self.params, TangParams) else Aggregator.ADADPSYN

    @property
    def accountant(self) -> Accountant:
        return accountant_for(self.accounting)

    def sampling(self, n_label: int) -> Sampling:
        """How each token step samples a label partition of ``n_label`` records."""
        return sampling_for(self.accounting, n_label=n_label, M=self.M, N=self.N)

    def label_event(self, n_label: int, shots: int, label: str | None = None) -> SampledEvent:
        """The rounds of ``shots`` demonstrations of one label (tmax tokens each, worst case),
        with that label's parameters (``params`` if None)."""
        params = self.params if label is None else self.params_for(label)
        return SampledEvent(self.sampling(n_label), params.round_events(), shots * self.tmax)

    def synthesis_event(
        self, label_sizes: Mapping[str, int], shots: Mapping[str, int]
    ) -> SynthesisEvent:
        """The event of a job that generates ``shots[label]`` demonstrations per label."""
        unknown = set(shots) - set(label_sizes)
        if unknown:
            raise ValueError(f"shots requested for labels without records: {sorted(unknown)}")
        release = None if self.count_sigma is None else GaussianEvent(self.count_sigma)
        return SynthesisEvent(
            tuple(
                LabelEvent(label, self.label_event(label_sizes[label], count, label), release)
                for label, count in shots.items()
                if count > 0
            )
        )

    def epsilon(
        self, label_sizes: Mapping[str, int], shots: Mapping[str, int], delta: float
    ) -> float:
        """Epsilon at ``delta`` that the job costs any one record of the dataset."""
        event = self.synthesis_event(label_sizes, shots)
        return self.accountant.dataset_epsilon(event, delta)

    def with_free_multiplier(self, value: float) -> SynthesisPrivacy:
        """The same privacy with the calibrated multiplier (sigma or sigma1) set to ``value``
        (the calibration of one label: its privacy has no per-label parameters)."""
        return self.model_copy(update={"params": self.params.with_free_multiplier(value)})

    def noise_by_label(self) -> dict[str, float]:
        """Each label's calibrated multiplier (sigma for Tang's mean, sigma1 for AdaDPSyn's
        means): what a job's record and its quote show."""
        return {label: params.free_multiplier for label, params in self.label_params.items()}


def label_schedule(labels: Sequence[str], n_shots: int, rng: np.random.Generator) -> list[str]:
    """Labels of the ``n_shots`` demonstrations: without replacement, repeating only when
    ``n_shots`` exceeds the number of labels (then in fresh random rounds over all labels).

    Uses public randomness only; the label set is public.
    """
    if not labels:
        raise ValueError("the label set is empty")
    rounds = math.ceil(n_shots / len(labels))
    order: list[str] = []
    for _ in range(rounds):
        order.extend(labels[i] for i in rng.permutation(len(labels)))
    return order[:n_shots]


def shots_per_label(schedule: Sequence[str]) -> dict[str, int]:
    """How many demonstrations each label gets in ``schedule``."""
    return dict(Counter(schedule))
