"""The Gaussian mechanism as a small object that knows its sensitivity and its noise.

A mechanism here never accounts for itself. It exposes :meth:`GaussianMechanism.event`, a
description of what ran, and the accountants in :mod:`app.privacy.accounting` turn
descriptions into (epsilon, delta).

Convention: ``noise_multiplier`` is the noise standard deviation divided by the L2
sensitivity of the query under the neighbouring relation in force. With this convention the
privacy of one release depends on the multiplier alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from app.privacy import releases
from app.privacy.events import GaussianEvent, Sensitivity


class Relation(StrEnum):
    """Which pairs of datasets count as neighbours (differ by one record)."""

    ADD_OR_REMOVE = "add_or_remove"
    REPLACE_ONE = "replace_one"


@dataclass(frozen=True)
class GaussianMechanism:
    """Release ``query + N(0, (noise_multiplier * sensitivity)^2 I)``.

    ``sensitivity`` is the largest L2 change of the query between neighbouring inputs; each
    caller states in its docstring why its query has that sensitivity. A multiplier of 0 means
    no noise (the epsilon = infinity baseline); accountants report infinity for it.
    """

    name: str
    sensitivity: float
    noise_multiplier: float

    def __post_init__(self) -> None:
        if not self.sensitivity > 0:
            raise ValueError(f"{self.name}: sensitivity must be > 0, got {self.sensitivity}")
        if not self.noise_multiplier >= 0:
            raise ValueError(
                f"{self.name}: noise_multiplier must be >= 0, got {self.noise_multiplier}"
            )

    @property
    def std(self) -> float:
        """Standard deviation of the added noise."""
        return self.noise_multiplier * self.sensitivity

    def release(
        self, value: np.ndarray | float, rng: np.random.Generator, rows: int = 1
    ) -> np.ndarray:
        """Return ``value`` plus fresh Gaussian noise of standard deviation :attr:`std`,
        drawn through :func:`app.privacy.releases.gaussian_release` (which records it). ``rows``:
        ``value`` holds that many separate releases of this mechanism, one per entry along
        its first axis (the token loop's stacked steps), each of this sensitivity."""
        value = np.asarray(value, dtype=float)
        return releases.gaussian_release(value, self.described(), rng, rows=rows)

    def described(self) -> GaussianEvent:
        """One release as a primitive event in the noise's units: std :attr:`std`, L2
        sensitivity :attr:`sensitivity` under the relation in force (stated for both: each
        caller's docstring says which relation it analysed)."""
        both = Sensitivity(self.sensitivity, self.sensitivity)
        return GaussianEvent(self.std, sensitivity=both)

    def event(self) -> GaussianEvent:
        """What the accountant needs to know about one release."""
        return GaussianEvent(noise_multiplier=self.noise_multiplier)
