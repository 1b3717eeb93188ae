"""The ledger's rule across jobs: a privacy filter that stays valid when jobs are chosen
adaptively (pure math, no I/O; docs/privacy.md, "The ledger's rule across jobs").

A team picks its next job after reading the last one's prompt, so both the mechanisms a
dataset runs and their privacy parameters depend on earlier outputs. Composing the jobs'
privacy loss distributions and admitting while the composition stays within the budget (the
"natural" PLD filter) is not valid then (Honkela, Koskela, Tran and Räisä 2026;
``tests/privacy/test_filter.py`` holds a counterexample). The ledger admits a job only while
the dataset's live spend passes **one of two valid filters**, each given half of the
budget's delta:

* **The Rényi filter** (any adaptive sequence). Orders ``a`` in a set fixed by the budget
  (:meth:`FilterParams.for_budget`), each with a share ``w_a`` of the filter's delta
  ``delta_R``. Every live item charges its Rényi-DP curve ``rho_i(a)`` (for a job: the sum
  over its steps, exact for mechanisms whose parameters were fixed at its admission). The
  filter passes while ``min_a [sum_i rho_i(a) + c_a] <= epsilon_B`` with
  ``c_a = log(1 - 1/a) - (log(w_a delta_R) + log a) / (a - 1)``. Theorem: then the whole
  adaptive sequence is (epsilon_B, delta_R)-DP. Proof sketch: for each order the process
  ``exp((a-1)(L_t - R_t(a)))`` (L the privacy loss so far, R the charged RDP) is a
  non-negative supermartingale (Feldman and Zrnic 2021; Whitehouse, Ramdas, Rogers and Wu
  2023), so its expectation at the stopping time is at most 1. Where the filter stopped,
  some order ``a*`` still passes, and ``(1 - e^(eps - L))_+ <= C_a e^((a-1)(L - eps))``
  with ``C_a = (1/a)(1 - 1/a)^(a-1)`` (the conversion of Balle et al. 2020 / Canonne,
  Kamath and Steinke 2020), so
  ``delta(eps) <= sum_a C_a e^((a-1)(R(a) - eps)) E[...] <= sum_a w_a delta_R``.
* **The one-batch rule** (no adaptivity after the count releases). While every live job
  touching a record's group was declared in one batch (a single job is a batch of one), the
  group's spend is its count releases' epsilons plus the tight composition of the batch at
  the other half of delta less theirs: basic composition of (release, batch), valid for an
  adaptively chosen batch (Dwork, Rothblum and Vadhan 2010), the batch's jobs composed
  exactly because they were all fixed before any ran.

Why either may be used: a rule that admits while *either* of two valid filters passes is a
valid filter at the sum of their deltas, since both conditions are monotone (a sequence that
once fails one fails it for good): every admitted sequence lies wholly inside one of them,
and the probability of each part is that filter's own run's. Label groups are priced apart,
as the accountants group them (a record sits in one partition): each group takes the better
of the two rules, and the dataset's spend is its largest group's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

import numpy as np

from app.privacy import rdp
from app.privacy.accounting import (
    Accountant,
    Priced,
    _subsampled_gaussian_rdp,
)
from app.privacy.composition import UnsupportedEventError, active, active_parts, noiseless
from app.privacy.events import (
    ComposedEvent,
    DatasetEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
    SelfComposedEvent,
)
from app.privacy.sampling import PoissonSampling

#: Orders the filter may use (integers: the subsampled Gaussians' curves are exact there).
GRID: tuple[int, ...] = (
    2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 192, 256,
)  # fmt: skip
#: The share of the budget's delta the Rényi filter takes; the one-batch rule takes the rest.
RENYI_SHARE = 0.5
#: The share of the Rényi filter's delta at the order that a budget's margin needs
#: (:meth:`FilterParams.for_budget`), and at each of its two neighbours; the other orders
#: share what is left equally.
CENTRE_WEIGHT, NEIGHBOUR_WEIGHT = 0.5, 0.125


class Rule(StrEnum):
    """Which valid filter priced a spend."""

    RENYI_FILTER = "renyi_filter"  # any adaptive sequence of jobs
    ONE_BATCH = "one_batch"  # the count releases and one declared batch (or one job)


@dataclass(frozen=True)
class FilterParams:
    """The filter of one budget: its epsilon and delta, the orders and each order's share
    of the Rényi filter's delta. A function of the budget's two public numbers only, so a
    budget's filter is fixed when the budget is set (a changed budget is a new filter)."""

    epsilon: float
    delta: float
    orders: tuple[int, ...]
    weights: tuple[float, ...]
    renyi_share: float = RENYI_SHARE

    @classmethod
    def for_budget(cls, epsilon: float, delta: float) -> FilterParams:
        """The filter of a budget (epsilon, delta). The centre order is the one at which a
        Gaussian mechanism that alone spends the whole budget converts best: near the
        margin, where admission is decided, a long composition of subsampled Gaussians has
        the curve of a Gaussian (the dominant order moves little with the jobs' shape)."""
        centre = _centre_order(float(epsilon), float(delta))
        index = GRID.index(centre)
        near = {i for i in (index - 1, index + 1) if 0 <= i < len(GRID)}
        rest = (1.0 - CENTRE_WEIGHT - NEIGHBOUR_WEIGHT * len(near)) / (len(GRID) - 1 - len(near))
        weights = tuple(
            CENTRE_WEIGHT if i == index else NEIGHBOUR_WEIGHT if i in near else rest
            for i in range(len(GRID))
        )
        return cls(float(epsilon), float(delta), GRID, weights)

    @property
    def renyi_delta(self) -> float:
        return self.delta * self.renyi_share

    @property
    def batch_delta(self) -> float:
        """The delta of the one-batch rule (releases' deltas included)."""
        return self.delta - self.renyi_delta

    @functools.cached_property
    def offsets(self) -> np.ndarray:
        """``c_a`` per order: what converting the summed RDP at ``a`` to epsilon adds."""
        a = np.asarray(self.orders, dtype=float)
        log_delta = np.log(np.asarray(self.weights) * self.renyi_delta)
        return np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1)

    def renyi_epsilon(self, curve: np.ndarray) -> float:
        """The Rényi filter's spend of a summed RDP ``curve`` (at :attr:`orders`): the least
        budget epsilon it passes at."""
        with np.errstate(invalid="ignore"):
            values = np.where(np.isnan(curve), np.inf, curve + self.offsets)
        return float(max(0.0, np.min(values)))


@functools.lru_cache(maxsize=256)
def _centre_order(epsilon: float, delta: float) -> int:
    """The grid order at which a Gaussian that is (epsilon, delta)-DP converts best."""
    from app.privacy.unit import count_noise_multiplier  # no cycle: unit reads no filter

    try:
        sigma = count_noise_multiplier(epsilon, delta)
    except OverflowError:  # e^epsilon overflows (epsilon > 709): the smallest order is best
        return GRID[0]
    a = np.asarray(GRID, dtype=float)
    values = a / (2 * sigma**2) + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    return GRID[int(np.argmin(values))]


def rdp_curve(event: Priced, orders: tuple[int, ...]) -> np.ndarray:
    """Rényi DP at integer ``orders`` of a resolved primitive (multipliers relative to
    sensitivity 1 under the accountant's relation), for both directions of the pair.

    Poisson-subsampled Gaussians: Mironov, Talwar and Zhang (2019), exact. Fixed-size
    subsamples (replace-one): the Wang-Balle-Kasiviswanathan bound. A Laplace mechanism on a
    Poisson subsample is priced as the Laplace mechanism on every record (no amplification:
    an upper bound, by the joint convexity of the Rényi divergence's exponential)."""
    o = np.asarray(orders)
    if isinstance(event, GaussianEvent):
        return event.count * rdp.gaussian_rdp(event.noise_multiplier, o)
    if isinstance(event, LaplaceEvent):
        return event.count * rdp.laplace_rdp(event.noise_multiplier, o)
    if isinstance(event, PureDpEvent):
        return event.count * rdp.pure_dp_rdp(event.epsilon, o)
    if isinstance(event, RandomizedResponseEvent):
        curve = rdp.randomized_response_rdp(event.noise_parameter, event.num_buckets, o)
        return event.count * curve
    if isinstance(event, SelfComposedEvent):
        return event.count * rdp_curve(cast(Priced, event.event), orders)
    if isinstance(event, ComposedEvent):
        return sum((rdp_curve(p, orders) for p in active_parts(event)), np.zeros(o.shape))
    return event.steps * _sampled_curve(event, orders)


def _sampled_curve(event: SampledEvent, orders: tuple[int, ...]) -> np.ndarray:
    """One step of a sampled event."""
    laplace = [m for m in event.mechanisms if isinstance(m, LaplaceEvent)]
    if laplace:
        if not isinstance(event.sampling, PoissonSampling):
            raise UnsupportedEventError(
                "the Rényi filter has no bound for a Laplace mechanism on a subsample drawn "
                "without replacement"
            )
        return rdp.laplace_rdp(laplace[0].noise_multiplier, np.asarray(orders))
    if isinstance(event.sampling, PoissonSampling):
        return _poisson_curve(event.sampling.rate, event.noise_multiplier, orders)
    return _subsampled_gaussian_rdp(event.sampling.rate, event.noise_multiplier, orders)


@functools.lru_cache(maxsize=2048)
def _poisson_curve(rate: float, sigma: float, orders: tuple[int, ...]) -> np.ndarray:
    """Memo: the ledger prices every live job's curve at every admission."""
    curve = rdp.poisson_subsampled_gaussian_rdp(rate, sigma, np.asarray(orders))
    curve.setflags(write=False)
    return curve


@dataclass(frozen=True)
class Release:
    """A count release as the filter prices it: its noise multiplier relative to its
    sensitivity under the budget's relation, and what it costs alone (epsilon at its own
    delta, the one-batch rule's price)."""

    sigma: float
    epsilon: float
    delta: float


@dataclass(frozen=True)
class Item:
    """One live job as the filter sees it: its event, the batch it was declared in (its
    own ID when it was submitted alone) and the dataset it read ("": the budget's own)."""

    event: DatasetEvent
    batch: str
    dataset: str = ""


@dataclass(frozen=True)
class GroupPrice:
    """One exposure group's spend: the better of the two rules (``rule`` says which) and
    both rules' values (``one_batch`` is infinite once the group's jobs span two batches).
    ``composed`` is the tight composition the ledger used before the filter (releases plus
    jobs composed at the budget's delta less theirs): not a valid price across adaptive
    jobs, shown for comparison."""

    labels: tuple[str, ...]
    epsilon: float
    rule: Rule
    renyi: float
    one_batch: float
    composed: float
    jobs: frozenset[int]


@dataclass(frozen=True)
class Group:
    """The primitives one record can be exposed to together, and the jobs they came from."""

    labels: tuple[str, ...]
    leaves: list[Priced]
    jobs: set[int]


def exposure_groups(
    accountant: Accountant, items: Sequence[Item], labels: Sequence[str] = ()
) -> list[Group]:
    """The accountant's exposure groups (:meth:`~app.privacy.accounting.Accountant.
    exposures`) with the jobs that charge each: one per label (and per pair under
    replace-one), each joined by the jobs that read every record. ``labels`` adds labels no
    job has read yet.

    Label groups assume one record sits in one label's partition. Jobs of several datasets
    on one budget (uploads linked because they share records) may hold one person's record
    under two labels (a label corrected between uploads): then every label is priced as
    one group (conservative)."""
    if len({item.dataset for item in items if item.dataset}) > 1:
        return _one_group(accountant, items)
    by_label: dict[str, list[Priced]] = {label: [] for label in labels}
    jobs: dict[str, set[int]] = {label: set() for label in labels}
    everyone: list[Priced] = []
    whole: set[int] = set()
    for index, item in enumerate(items):
        for label, leaf in accountant.priced(item.event):
            if label is None:
                everyone.append(leaf)
                whole.add(index)
                continue
            by_label.setdefault(label, []).append(leaf)
            charged = jobs.setdefault(label, set())
            if active(leaf):
                charged.add(index)
    names: list[tuple[str, ...]] = [(label,) for label in by_label]
    if accountant.relation.value == "replace_one":
        names += [(a, b) for i, a in enumerate(by_label) for b in list(by_label)[i + 1 :]]
    if not names:
        names = [()]
    return [
        Group(
            name,
            [p for label in name for p in by_label[label]] + everyone,
            set(whole).union(*(jobs[label] for label in name)),
        )
        for name in names
    ]


def _one_group(accountant: Accountant, items: Sequence[Item]) -> list[Group]:
    """Every job's primitives in one group, whatever labels they read."""
    leaves = [leaf for item in items for _, leaf in accountant.priced(item.event)]
    return [Group((), leaves, set(range(len(items))))]


def price_groups(
    params: FilterParams,
    accountant: Accountant,
    items: Sequence[Item],
    releases: Sequence[Release] = (),
    labels: Sequence[str] = (),
) -> list[GroupPrice]:
    """Every exposure group's spend under the filter."""
    return [_price(params, accountant, items, releases, group) for group in
            exposure_groups(accountant, items, labels)]  # fmt: skip


def _price(
    params: FilterParams,
    accountant: Accountant,
    items: Sequence[Item],
    releases: Sequence[Release],
    group: Group,
) -> GroupPrice:
    live = [leaf for leaf in group.leaves if active(leaf)]
    for leaf in live:
        accountant.check(leaf)
    counts_epsilon = math.fsum(r.epsilon for r in releases)
    counts_delta = math.fsum(r.delta for r in releases)
    if any(noiseless(leaf) for leaf in live):
        inf, jobs = math.inf, frozenset(group.jobs)
        return GroupPrice(group.labels, inf, Rule.RENYI_FILTER, inf, inf, inf, jobs)
    curve = sum((rdp_curve(leaf, params.orders) for leaf in live), np.zeros(len(params.orders)))
    for release in releases:
        curve = curve + rdp.gaussian_rdp(release.sigma, np.asarray(params.orders))
    renyi = params.renyi_epsilon(curve) if (live or releases) else 0.0
    composed = counts_epsilon + _tight(accountant, live, params.delta - counts_delta)
    batches = {items[i].batch for i in group.jobs}
    one_batch = math.inf
    if len(batches) <= 1:
        one_batch = counts_epsilon + _tight(accountant, live, params.batch_delta - counts_delta)
    rule = Rule.ONE_BATCH if one_batch <= renyi else Rule.RENYI_FILTER
    return GroupPrice(
        group.labels, min(renyi, one_batch), rule, renyi, one_batch, composed,
        frozenset(group.jobs),
    )  # fmt: skip


def _tight(accountant: Accountant, live: Sequence[Priced], delta: float) -> float:
    """The accountant's composition of ``live`` at ``delta`` (infinite at no delta)."""
    if not live:
        return 0.0
    if delta <= 0:
        return math.inf
    return accountant.epsilon(list(live), delta)


@dataclass(frozen=True)
class Price:
    """A dataset's spend under the filter: its largest group's (``rule``: the rule that
    priced that group), and the tight composition beside it (``composed``)."""

    epsilon: float
    rule: Rule
    composed: float
    groups: tuple[GroupPrice, ...]


def price(
    params: FilterParams,
    accountant: Accountant,
    items: Sequence[Item],
    releases: Sequence[Release] = (),
    labels: Sequence[str] = (),
) -> Price:
    """The dataset's spend: the largest group's price under the filter."""
    if not items and not releases:
        return Price(0.0, Rule.ONE_BATCH, 0.0, ())
    groups = price_groups(params, accountant, items, releases, labels)
    top = max(groups, key=lambda g: g.epsilon)
    composed = max(g.composed for g in groups)
    return Price(top.epsilon, top.rule, composed, tuple(groups))
