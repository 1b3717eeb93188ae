"""Gaussian aggregation of next-token distributions (Tang et al. 2023, Algorithm 2)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.privacy.geometry import SIMPLEX_DIAMETER
from app.privacy.mechanisms import GaussianMechanism
from app.privacy.params import TangParams


@dataclass
class AggregationResult:
    """A noisy next-token distribution, the token chosen from it, and what ran."""

    distribution: np.ndarray
    token: int
    released: list[GaussianMechanism] = field(default_factory=list)
    diagnostics: dict[str, object] = field(default_factory=dict)


def mean_mechanism(M: int, sigma: float) -> GaussianMechanism:
    """Noisy mean of M probability vectors.

    Sensitivity sqrt(2)/M, under this relation: two neighbouring inputs differ in one of the
    M vectors (one teacher's subset gained, lost or swapped one record, and with it that
    teacher's prompt and distribution), the other M-1 vectors and the divisor M being equal.
    The changed vector moves from p to p', both on the probability simplex, and
    ||p - p'||_2 <= sqrt(2) with equality for two distinct vertices. Dividing the sum by the
    fixed M gives sqrt(2)/M. The added noise has standard deviation sigma * sqrt(2) / M.
    """
    if M < 1:
        raise ValueError(f"M must be >= 1, got {M}")
    return GaussianMechanism("tang.mean", SIMPLEX_DIAMETER / M, sigma)


def gaussian_aggregate(
    probs: np.ndarray, params: TangParams, rng: np.random.Generator
) -> AggregationResult:
    """Mean of the M rows of ``probs`` (M x K) plus Gaussian noise, then argmax."""
    probs = np.asarray(probs, dtype=float)
    if probs.ndim != 2:
        raise ValueError(f"expected an M x K array, got shape {probs.shape}")
    mechanism = mean_mechanism(probs.shape[0], params.sigma)
    noisy = mechanism.release(probs.mean(axis=0), rng)
    return AggregationResult(noisy, int(np.argmax(noisy)), [mechanism])
