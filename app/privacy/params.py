"""Validated parameters of the token loop's two aggregators, one object per aggregator.

Each object knows which Gaussian mechanisms one token step runs (:meth:`round_events`), so
the accountant prices exactly the mechanisms the aggregator uses. Field names follow the
papers: sigma0 (GoodRadius), sigma1 (projected means), sigma2 (coverage checks), T (rounds of
radius reduction), lam (lambda), mu, tau, theta.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from app.documented import Documented
from app.privacy.events import GaussianEvent
from app.privacy.geometry import SIMPLEX_RADIUS


class Aggregator(StrEnum):
    """The token loop's aggregation function (not a method: a method is an
    :class:`app.methods.base.Method`; the token loop is registered once per aggregator, under
    the aggregator's value as its name)."""

    TANG = "tang"
    ADADPSYN = "adadpsyn"


NoiseMultiplier = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class _Params(Documented):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TangParams(_Params):
    """DP few-shot generation (Tang et al. 2023): a noisy mean of the M distributions."""

    sigma: NoiseMultiplier
    """Noise multiplier: noise std of the mean divided by its sensitivity sqrt(2)/M."""

    @property
    def free_multiplier(self) -> float:
        return self.sigma

    def with_free_multiplier(self, value: float) -> TangParams:
        return self.model_copy(update={"sigma": value})

    def round_events(self) -> tuple[GaussianEvent, ...]:
        return (GaussianEvent(self.sigma),)


def binary_search_steps(theta: float) -> int:
    """Halvings GoodRadius makes: the interval [0, sqrt(2)/2] shrinks until it is <= theta.

    The count depends on theta alone, never on the data, so every token step runs (and is
    charged for) exactly this many iterations, each with two noisy comparisons.
    """
    return max(0, math.ceil(math.log2(SIMPLEX_RADIUS / theta) - 1e-12))


class AdaDPSynVariant(StrEnum):
    """Which AdaDPSyn aggregation runs (``docs/privacy.md``, "AdaDPSyn variants").

    ``paper``: Algorithm 1 as published: GoodRadius, coverage checks centred on the last
    noisy mean, the last projected mean is the output. ``pooled`` (default): every charged
    projected mean runs and all are combined by inverse-variance weighting; the coverage
    check is centred on that combined estimate and has a false-positive margin; GoodRadius
    runs only where its noise lets it see the data (else radii shrink by a fixed factor).
    """

    PAPER = "paper"
    POOLED = "pooled"


class AdaDPSynParams(_Params):
    """AdaDPSyn (Gao et al.): GoodRadius, then precision-focused iterative radius reduction."""

    variant: AdaDPSynVariant = AdaDPSynVariant.PAPER
    """'paper' (as published) or 'pooled'. The service's default is 'pooled'
    (app.synthesis.config); a bare parameter object is the published algorithm."""
    sigma0: NoiseMultiplier = 15.0
    """GoodRadius comparisons (std 2*sigma0)."""
    sigma1: NoiseMultiplier
    """Projected means (std 2*R*sigma1/M)."""
    sigma2: NoiseMultiplier = 5.0
    """Coverage checks (std sigma2)."""
    T: int = Field(2, ge=0, le=20)
    """Maximum rounds of radius reduction."""
    lam: float = Field(0.2, ge=0.0, le=10.0)
    """Noise margin factor lambda."""
    mu: float = Field(0.55, gt=0.0, le=1.0)
    """Coverage fraction to keep shrinking."""
    tau: float = Field(0.8, gt=0.0, le=1.0)
    """GoodRadius coverage fraction."""
    theta: float = Field(0.1, gt=0.0, lt=SIMPLEX_RADIUS)
    """GoodRadius binary-search tolerance."""
    good_radius: bool = True
    """pooled: run GoodRadius for the radius target ('paper' always does)."""
    slack: float = Field(0.0, ge=0.0, le=10.0)
    """pooled: GoodRadius accepts noisy L >= t - slack * 2*sigma0 (Nissim et al.)."""
    coverage_margin: float = Field(0.0, ge=0.0, le=10.0)
    """pooled: a coverage check passes at noisy count >= mu*M + margin*sigma2."""
    shrink: float = Field(0.5, gt=0.0, lt=1.0)
    """pooled without GoodRadius: each round tries radius * shrink."""
    clip: float | None = Field(None, gt=0.0, le=1.0)
    """pooled: the means no passed check has projected use every teacher clipped to this L2
    distance from the uniform distribution (sensitivity sqrt(2 clip^2 + 2/K)/M instead of
    sqrt(2)/M); None: not clipped."""

    @model_validator(mode="after")
    def _clip_is_pooled(self) -> AdaDPSynParams:
        if self.clip is not None and self.variant is not AdaDPSynVariant.POOLED:
            raise ValueError("clip applies to the pooled variant only")
        return self

    @property
    def free_multiplier(self) -> float:
        return self.sigma1

    def with_free_multiplier(self, value: float) -> AdaDPSynParams:
        return self.model_copy(update={"sigma1": value})

    @property
    def runs_good_radius(self) -> bool:
        return self.variant is AdaDPSynVariant.PAPER or self.good_radius

    def coverage_target(self, M: int) -> int:
        """t = ceil(tau * M): how many of the M points GoodRadius's ball must hold."""
        return math.ceil(self.tau * M - 1e-9)

    def round_events(self) -> tuple[GaussianEvent, ...]:
        """Worst case of one token step: every round of radius reduction runs.

        Both variants are charged the same way; ``pooled`` only spends what ``paper`` leaves
        unused, and drops GoodRadius's comparisons when it does not run them.
        """
        events = [GaussianEvent(self.sigma1, self.T + 1)]
        if self.runs_good_radius:
            events.insert(0, GaussianEvent(self.sigma0, 2 * binary_search_steps(self.theta)))
        if self.T > 0:
            events.append(GaussianEvent(self.sigma2, self.T))
        return tuple(events)


AggregatorParams = TangParams | AdaDPSynParams


# The AdaDPSyn paper's constants by M (Tables 13-17): M = 10 for AG News, DBPedia and SST-2,
# M = 20 for TREC, M = 40 for MIT-G/D.
_PAPER_BY_M: tuple[tuple[int, dict[str, object]], ...] = (
    (10, {"T": 1, "sigma0": 10.0, "sigma2": 3.0, "lam": 0.2}),
    (20, {"T": 2, "sigma0": 15.0, "sigma2": 5.0, "lam": 0.2}),
)
# The pooled variant's constants by M, chosen with bench/aggregation_fidelity.py
# (docs/privacy.md, "AdaDPSyn variants", argues each).
_POOLED_BY_M: tuple[tuple[int, dict[str, object]], ...] = (
    (10, {"T": 1, "sigma2": 5.0, "mu": 0.3, "shrink": 0.55, "good_radius": False}),
)


def adadpsyn_defaults(M: int, variant: AdaDPSynVariant) -> dict[str, object]:
    """AdaDPSyn's constants for M teachers: the row of the largest tabulated M <= M (the
    first row below the smallest). Returns fields of :class:`AdaDPSynParams`."""
    table = _PAPER_BY_M if variant is AdaDPSynVariant.PAPER else _POOLED_BY_M
    row = table[0][1]
    for bound, values in table:
        if bound <= M:
            row = values
    return {"variant": variant, **row}
