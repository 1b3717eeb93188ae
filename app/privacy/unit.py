"""The privacy unit the service keeps, and what it takes to keep it for counts too (issue 32).

**The unit.** Add or remove any one record, with nothing about the dataset's size assumed.
Every value that depends on the private dataset and leaves a job is either a DP output,
charged on the ledger as a mechanism of its own, or a function of public inputs only.

Two values that the papers take from the data are therefore taken elsewhere:

* **delta** is a public setting (:data:`DEFAULT_DELTA` unless the owner sets one), never
  1/|D|: a delta of 1/|D| printed on every prompt is the dataset's exact size.
* **The label sizes** that a token-loop job plans with (sampling rate, noise calibration, the
  AdaDPSyn planner's choice) are either declared public by the data owner (an explicit opt-in
  per dataset) or released with the Gaussian mechanism of :func:`release_counts` at a small
  share of the job's budget (:data:`COUNT_SHARE`). The release is one more Gaussian mechanism
  in the job's event (``LabelEvent.count_release``), composed with the token steps by the
  same accountant, so the job's epsilon covers it.

**Why the sampling stays valid.** Under the tight accountant every record joins a step's
sample independently with probability q (Poisson sampling); the amplification bound for
add/remove neighbours holds for any q fixed before the step, whatever the partition's true
size (Zhu, Dong and Wang 2022). Here q = min(1, M N / n~), with n~ the released (or public)
count, so q is a post-processing of DP outputs and public settings: a record's presence moves
q only through the count release, which is charged. How close n~ is to n only affects how many
examples a teacher gets on average (N n / n~), never the guarantee. Fixed-size sampling
(the paper accountant) draws exactly M N of n records and is analysed for replace-one
neighbours with n fixed: it needs the counts declared public.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from scipy.stats import norm

#: The delta of a budget or job when the owner sets none: public, the same for every
#: dataset, and below 1/|D| for any dataset of up to a million records.
DEFAULT_DELTA = 1e-6

#: The share of a job's epsilon that its count release may cost on its own (at the job's
#: delta): 5 %. Composed with the token steps by the accountant, the release costs less than
#: that at the margin; the steps' noise is calibrated so that the whole job meets its target.
COUNT_SHARE = 0.05


def gaussian_delta(sigma: float, epsilon: float) -> float:
    """The exact delta(epsilon) of a Gaussian mechanism with noise multiplier ``sigma`` (L2
    sensitivity 1): Phi(1/(2 sigma) - epsilon sigma) - e^epsilon Phi(-1/(2 sigma) - epsilon
    sigma) (Balle and Wang 2018, Theorem 8)."""
    a = 1.0 / (2.0 * sigma)
    b = epsilon * sigma
    return float(norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b))


def count_noise_multiplier(epsilon: float, delta: float, share: float = COUNT_SHARE) -> float:
    """The smallest noise multiplier (within 0.1 %) at which the Gaussian count release alone
    is (share * epsilon, delta)-DP: a public function of the job's budget.

    delta(epsilon) of a Gaussian falls as sigma grows, so a bisection on sigma finds it."""
    target = share * epsilon
    if not (math.isfinite(target) and target > 0 and 0 < delta < 1):
        raise ValueError(f"need a finite epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
    low, high = 1e-3, 1.0
    while gaussian_delta(high, target) > delta:
        high *= 2.0
    while high - low > 1e-3 * high:
        middle = (low + high) / 2.0
        if gaussian_delta(middle, target) > delta:
            low = middle
        else:
            high = middle
    return high


def release_counts(
    sizes: Mapping[str, int], sigma: float, rng: np.random.Generator
) -> dict[str, int]:
    """Each label's record count plus N(0, sigma^2), rounded, and at least 1.

    Mechanism: the Gaussian mechanism on the vector of per-label counts. Neighbouring
    relation: add/remove one record, which changes exactly one label's count by 1, so the L2
    sensitivity is 1 and each label's count is a Gaussian of multiplier ``sigma`` on the
    records of that label only (the accountant charges it to that label's group). Rounding and
    the floor of 1 (a sampling rate needs a positive size) are post-processing.
    """
    noise = rng.normal(0.0, sigma, size=len(sizes))
    return {
        label: max(1, round(count + float(z)))
        for (label, count), z in zip(sizes.items(), noise, strict=True)
    }
