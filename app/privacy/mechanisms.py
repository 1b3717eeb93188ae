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

from app.privacy.events import GaussianEvent


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

    def release(self, value: np.ndarray | float, rng: np.random.Generator) -> np.ndarray:
        """Return ``value`` plus fresh Gaussian noise of standard deviation :attr:`std`."""
        value = np.asarray(value, dtype=float)
        if self.std == 0.0:
            return value.copy()
        return value + rng.normal(0.0, self.std, size=value.shape)

    def event(self) -> GaussianEvent:
        """What the accountant needs to know about one release."""
        return GaussianEvent(noise_multiplier=self.noise_multiplier)
