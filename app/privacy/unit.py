"""The privacy unit the service keeps, and the one release of a dataset's label counts.

**The unit.** Add or remove any one record, with nothing about the dataset's size assumed.
Every value that depends on the private dataset and leaves the service is either a DP
output, charged on the ledger, or a function of public inputs only.

Two values that the papers take from the data are therefore taken elsewhere:

* **delta** is a public setting (:data:`DEFAULT_DELTA` unless the owner sets one), never
  1/|D|: a delta of 1/|D| printed on every prompt is the dataset's exact size.
* **The label sizes** that a job plans with (sampling rate, noise calibration, the AdaDPSyn
  planner's choice) are either declared public by the data owner (an explicit opt-in per
  dataset) or read from **one release per dataset** (:class:`CountRelease`): each label's
  count plus Gaussian noise, drawn once, when a plan first needs it, charged once to the
  dataset's budget at a public share of it (:data:`COUNT_RELEASE_SHARE` of its epsilon and
  of its delta), stored, and read by every later quote, plan, refusal and job. A plan never
  sees an exact count (:class:`app.methods.base.Counts` holds released or declared counts
  only); it plans with each count's posterior mean given its release
  (:meth:`CountRelease.estimates`), a post-processing of the release.

**Why the guarantee holds** (docs/privacy.md, "The count release"). The release R is a
Gaussian mechanism, (eps_R, delta_R)-DP. Given its output y every job is a mechanism whose
parameters (sampling rate, noise) are functions of y and public settings, calibrated so that,
for *every* possible y, the jobs admitted on the dataset compose (by the budget's
accountant) to at most (B - eps_R, delta_B - delta_R). Adaptive composition of an
(eps_R, delta_R)-DP mechanism with a mechanism that is (eps', delta')-DP for every value of
the first's output is (eps_R + eps', delta_R + delta')-DP (Dwork, Rothblum and Vadhan 2010),
so the dataset's guarantee is (B, delta_B) whatever y was. The ledger therefore adds the
release's epsilon to the composition of the jobs (:func:`split_composition`) rather than
composing its privacy loss distribution with theirs: that would price the rate that the
release happened to give, which no theorem covers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.privacy.events import ComposedEvent, GaussianEvent, PartitionEvent

#: The delta of a budget or job when the owner sets none: public, the same for every
#: dataset, and below 1/|D| for any dataset of up to a million records.
DEFAULT_DELTA = 1e-6

#: The share of a dataset's budget (of its epsilon and of its delta) that its one count
#: release costs, when the service's setting ``DPSYN_COUNT_RELEASE_SHARE`` does not say
#: otherwise; a local run (``dpsyn synthesize``, ``dpsyn eval``) takes it from its job's
#: target instead, so that the run's whole cost is the epsilon asked.
COUNT_RELEASE_SHARE = 0.05


def gaussian_delta(sigma: float, epsilon: float) -> float:
    """The exact delta(epsilon) of a Gaussian mechanism with noise multiplier ``sigma`` (L2
    sensitivity 1): Phi(1/(2 sigma) - epsilon sigma) - e^epsilon Phi(-1/(2 sigma) - epsilon
    sigma) (Balle and Wang 2018, Theorem 8)."""
    from scipy.stats import norm  # here: SciPy costs every process start about a second

    a = 1.0 / (2.0 * sigma)
    b = epsilon * sigma
    return float(norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b))


def _smallest(fits: Callable[[float], bool], low: float, high: float) -> float:
    """The smallest x in (``low``, ...) with ``fits(x)``, within 1e-9 relative, where
    ``fits`` is false below some point and true from it on (a bisection; ``high`` doubles
    until it fits)."""
    while not fits(high):
        low, high = high, 2.0 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2.0
        if fits(middle):
            high = middle
        else:
            low = middle
    return high


@functools.lru_cache(maxsize=1024)
def gaussian_epsilon(sigma: float, delta: float) -> float:
    """The smallest epsilon (within 1e-9 relative) at which a Gaussian mechanism of
    multiplier ``sigma`` is (epsilon, delta)-DP: :func:`gaussian_delta` falls in epsilon, so
    a bisection finds it. 0 if ``delta`` already covers epsilon 0. Remembered: every spend
    prices each count release with it."""
    if not (sigma > 0 and 0 < delta < 1):
        raise ValueError(f"need sigma > 0 and delta in (0, 1), got {sigma}, {delta}")
    if gaussian_delta(sigma, 0.0) <= delta:
        return 0.0
    return _smallest(lambda epsilon: gaussian_delta(sigma, epsilon) <= delta, 0.0, 1.0)


@functools.lru_cache(maxsize=256)
def count_noise_multiplier(epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (within 1e-9 relative, so that the release costs its
    share to that precision) at which the Gaussian count release alone is (epsilon,
    delta)-DP: a public function of the budget's share.

    delta(epsilon) of a Gaussian falls as sigma grows, so a bisection on sigma finds it.
    Remembered: a public function of two numbers, asked again for every release."""
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need a finite epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
    return _smallest(lambda sigma: gaussian_delta(sigma, epsilon) <= delta, 1e-3, 1.0)


def release_share(epsilon: float, delta: float, share: float) -> tuple[float, float]:
    """The (epsilon, delta) a count release may cost out of a budget of (``epsilon``,
    ``delta``): ``share`` of each."""
    if not 0 < share < 1:
        raise ValueError(f"the count release's share must be in (0, 1), got {share}")
    return share * epsilon, share * delta


def posterior_mean(noisy: float, sigma: float) -> float:
    """E[n | n + N(0, sigma^2) = ``noisy``] under a flat prior on counts n >= 1: the mean of
    N(noisy, sigma^2) truncated to [1, inf), noisy + sigma phi(a) / (1 - Phi(a)) with
    a = (1 - noisy) / sigma (computed in logs, so that a release far below 1 still gives a
    finite, positive estimate). Never below 1, and never the floor a rounding would give:
    a release of -20 with sigma 83 plans with about 60 records, not with 1."""
    from scipy.special import log_ndtr
    from scipy.stats import norm

    a = (1.0 - noisy) / sigma
    hazard = math.exp(norm.logpdf(a) - float(log_ndtr(-a)))
    return max(1.0, noisy + sigma * hazard)


@dataclass(frozen=True)
class CountRelease:
    """One Gaussian release of a dataset's per-label record counts, and what it cost.

    Mechanism: the Gaussian mechanism on the vector of per-label counts, noise multiplier
    ``sigma``. Neighbouring relation: add/remove one record, which changes exactly one
    label's count by 1 (L2 sensitivity 1), so to any one record the release is one Gaussian
    mechanism of multiplier ``sigma``, on the partition of its label
    (:meth:`event`). ``noisy`` holds the released values as drawn (not rounded: every use
    of them is post-processing, :meth:`estimates`). ``epsilon`` and ``delta``: what it
    costs, the budget's share when it was drawn. ``id``: the service's name for it (its
    ledger entry); empty for a local run's.
    """

    sigma: float
    noisy: Mapping[str, float]
    epsilon: float
    delta: float
    id: str = ""
    _estimates: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError(f"a count release needs noise: sigma must be > 0, got {self.sigma}")
        for label, value in self.noisy.items():
            self._estimates[str(label)] = round(posterior_mean(float(value), self.sigma))

    def estimates(self) -> dict[str, int]:
        """Each label's planned size: the posterior mean given its release, rounded (>= 1)."""
        return dict(self._estimates)

    def event(self) -> ComposedEvent:
        """One Gaussian per label partition: what the ledger records of the release."""
        return ComposedEvent(
            tuple(PartitionEvent(label, GaussianEvent(self.sigma)) for label in self.noisy)
        )

    def epsilon_at(self, delta: float) -> float:
        """Its epsilon at ``delta``: one Gaussian of multiplier ``sigma`` (one record moves
        one count)."""
        return gaussian_epsilon(self.sigma, delta)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sigma": self.sigma,
            "noisy": {str(k): float(v) for k, v in self.noisy.items()},
            "epsilon": self.epsilon,
            "delta": self.delta,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CountRelease:
        return cls(
            sigma=float(data["sigma"]),
            noisy={str(k): float(v) for k, v in data["noisy"].items()},
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            id=str(data.get("id", "")),
        )


def release_counts(
    sizes: Mapping[str, int],
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    release_id: str = "",
) -> CountRelease:
    """Release each label's record count plus N(0, sigma^2), sigma the smallest at which the
    release alone is (``epsilon``, ``delta``)-DP (:func:`count_noise_multiplier`).

    Mechanism and relation: :class:`CountRelease`. ``rng`` must be the secure generator in
    production (:func:`app.privacy.rng.make_rng` without a seed)."""
    sigma = count_noise_multiplier(epsilon, delta)
    noise = rng.normal(0.0, sigma, size=len(sizes))
    noisy = {
        str(label): float(count) + float(z)
        for (label, count), z in zip(sizes.items(), noise, strict=True)
    }
    return CountRelease(sigma, noisy, epsilon, delta, release_id)


def local_release(
    sizes: Mapping[str, int],
    declared_public: bool,
    epsilon: float,
    delta: float | None,
    rng: np.random.Generator,
) -> CountRelease | None:
    """A local run's own count release (``dpsyn synthesize``, ``dpsyn eval``, studies):
    :data:`COUNT_RELEASE_SHARE` of the run's (``epsilon``, ``delta``), the job taking the
    rest, so that the run's whole cost is what was asked. None where no release is needed:
    counts declared public, or no finite positive epsilon (the baselines)."""
    if declared_public or not math.isfinite(epsilon) or epsilon <= 0:
        return None
    share_epsilon, share_delta = release_share(
        epsilon, delta if delta is not None else DEFAULT_DELTA, COUNT_RELEASE_SHARE
    )
    return release_counts(sizes, share_epsilon, share_delta, rng)


def counts_digest(label_counts: Mapping[str, Any], record_count: int) -> str:
    """A name for one version of a dataset's records (which release belongs to it): the
    SHA-256 of its exact counts. Kept in the database only, beside the counts themselves,
    and never shown: a digest of a few small integers is as good as the integers."""
    body = json.dumps(
        {"labels": {str(k): int(v) for k, v in label_counts.items()}, "n": int(record_count)},
        sort_keys=True,
    )
    return hashlib.sha256(body.encode()).hexdigest()
