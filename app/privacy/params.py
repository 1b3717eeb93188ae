"""Validated parameters of the two aggregation methods, one object per method.

Each object knows which Gaussian mechanisms one token step runs (:meth:`round_events`), so
the accountant prices exactly the mechanisms the aggregator uses. Field names follow the
papers: sigma0 (GoodRadius), sigma1 (projected means), sigma2 (coverage checks), T (rounds of
radius reduction), lam (lambda), mu, tau, theta.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.privacy.events import GaussianEvent
from app.privacy.geometry import SIMPLEX_RADIUS


class Method(StrEnum):
    """Aggregation method of the token loop."""

    TANG = "tang"
    ADADPSYN = "adadpsyn"


NoiseMultiplier = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TangParams(_Params):
    """DP few-shot generation (Tang et al. 2023): a noisy mean of the M distributions."""

    sigma: NoiseMultiplier = Field(
        description="Noise multiplier: noise std of the mean divided by its sensitivity sqrt(2)/M."
    )

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


class AdaDPSynParams(_Params):
    """AdaDPSyn (Gao et al.): GoodRadius, then precision-focused iterative radius reduction."""

    sigma0: NoiseMultiplier = Field(15.0, description="GoodRadius comparisons (std 2*sigma0).")
    sigma1: NoiseMultiplier = Field(description="Projected means (std 2*R*sigma1/M).")
    sigma2: NoiseMultiplier = Field(5.0, description="Coverage checks (std sigma2).")
    T: int = Field(2, ge=0, le=20, description="Maximum rounds of radius reduction.")
    lam: float = Field(0.2, ge=0.0, le=10.0, description="Noise margin factor lambda.")
    mu: float = Field(0.55, gt=0.0, le=1.0, description="Coverage fraction to keep shrinking.")
    tau: float = Field(0.8, gt=0.0, le=1.0, description="GoodRadius coverage fraction.")
    theta: float = Field(
        0.1, gt=0.0, lt=SIMPLEX_RADIUS, description="GoodRadius binary-search tolerance."
    )

    @property
    def free_multiplier(self) -> float:
        return self.sigma1

    def with_free_multiplier(self, value: float) -> AdaDPSynParams:
        return self.model_copy(update={"sigma1": value})

    def coverage_target(self, M: int) -> int:
        """t = ceil(tau * M): how many of the M points GoodRadius's ball must hold."""
        return math.ceil(self.tau * M - 1e-9)

    def round_events(self) -> tuple[GaussianEvent, ...]:
        """Worst case of one token step: every round of radius reduction runs."""
        events = [
            GaussianEvent(self.sigma0, 2 * binary_search_steps(self.theta)),
            GaussianEvent(self.sigma1, self.T + 1),
        ]
        if self.T > 0:
            events.append(GaussianEvent(self.sigma2, self.T))
        return tuple(events)


MethodParams = TangParams | AdaDPSynParams
