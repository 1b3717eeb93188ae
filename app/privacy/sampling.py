"""How each token step samples a label's records into M disjoint teacher subsets.

The sampling description is the same object that the accountant prices (it sits inside
:class:`app.privacy.events.SampledEvent`) and the object that draws the subsets, so the
sampling the generator performs cannot differ from the sampling the accountant assumes.

* :class:`PoissonSampling` (tight accountant, add/remove neighbours): every record of the
  partition independently joins group j with probability ``rate / groups`` for each j, and
  no group with probability ``1 - rate``. The expected number of records drawn is
  ``rate * n``. Adding or removing one record changes at most one group, by that one record.
* :class:`FixedSizeSampling` (paper-compatible accountant, replace-one neighbours): exactly
  ``groups * group_size`` records drawn uniformly without replacement from a partition of
  ``population`` records, then split into groups of ``group_size``.

Both return a list of index arrays, one per group, into the partition's records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class PoissonSampling:
    """Independent inclusion with probability ``rate``, into a uniformly chosen group."""

    #: The neighbouring relation its amplification is analysed for (the tight accountant's,
    #: which requires this sampling: :mod:`app.privacy.accounting`).
    relation: ClassVar[str] = "add_or_remove"

    rate: float
    groups: int

    def __post_init__(self) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"sampling rate must be in (0, 1], got {self.rate}")
        if self.groups < 1:
            raise ValueError(f"groups must be >= 1, got {self.groups}")

    def draw(self, n_records: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Draw the groups for one step from a partition of ``n_records`` records."""
        included = np.flatnonzero(rng.random(n_records) < self.rate)
        group_of = rng.integers(0, self.groups, size=included.size)
        return [included[group_of == j] for j in range(self.groups)]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "poisson", "rate": self.rate, "groups": self.groups}


@dataclass(frozen=True)
class FixedSizeSampling:
    """``groups * group_size`` records without replacement from ``population`` records."""

    #: The neighbouring relation its amplification is analysed for (the paper accountant's,
    #: which requires this sampling: :mod:`app.privacy.accounting`).
    relation: ClassVar[str] = "replace_one"

    population: int
    groups: int
    group_size: int

    def __post_init__(self) -> None:
        if self.groups < 1 or self.group_size < 1:
            raise ValueError(
                f"groups and group_size must be >= 1, got {self.groups} and {self.group_size}"
            )
        if self.sample_size > self.population:
            raise ValueError(
                f"cannot draw {self.sample_size} records (M*N) from a label partition of "
                f"{self.population}"
            )

    @property
    def sample_size(self) -> int:
        return self.groups * self.group_size

    @property
    def rate(self) -> float:
        return self.sample_size / self.population

    def draw(self, n_records: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Draw the groups for one step; the partition must have the planned size."""
        if n_records != self.population:
            raise ValueError(f"sampling was planned for {self.population} records, got {n_records}")
        chosen = rng.choice(n_records, size=self.sample_size, replace=False)
        return list(chosen.reshape(self.groups, self.group_size))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "fixed_size",
            "population": self.population,
            "groups": self.groups,
            "group_size": self.group_size,
        }


Sampling = PoissonSampling | FixedSizeSampling


def sampling_from_dict(data: dict[str, Any]) -> Sampling:
    """Inverse of ``to_dict`` for both sampling schemes."""
    kind = data.get("type")
    if kind == "poisson":
        return PoissonSampling(float(data["rate"]), int(data["groups"]))
    if kind == "fixed_size":
        return FixedSizeSampling(
            int(data["population"]), int(data["groups"]), int(data["group_size"])
        )
    raise ValueError(f"unknown sampling type {kind!r}")
