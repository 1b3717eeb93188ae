"""A black-box empirical privacy audit: a lower bound on the epsilon a method's outputs show.

The method contract (app/contract.py) runs a synthesis method many times, seeded, on a
dataset D and on a neighbour D', and passes the outputs here. Each run's output is given
under one or more *views* (view name -> a hashable key: the labels of the demonstrations,
their lengths, whether a record's text appears), so a leak can be looked for where it is
likely to show. Nothing here runs a method, reads a file or draws a random number: the
functions only count keys.

Method (after StatDP, Ding et al. 2018, and Google's DP-Auditorium): split each sample into
a selection part (its first ``select_fraction`` of runs) and a test part (the rest; runs are
i.i.d., so a fixed split is as good as a random one). On the selection part, for each view
and each direction, order the keys by their smoothed frequency ratio and take the prefix
sets of that order as candidate output events S (the likelihood-ratio tests of Neyman and
Pearson, estimated); the candidate whose bound, computed on the selection part, is largest
over all views and directions is the one event tested. On the test part, Clopper-Pearson
gives a lower bound ``p_lo`` on P(S | D) and an upper bound ``p_hi`` on P(S | D'), each at
level ``alpha / 2`` (one event, two probabilities), and the audit returns
``ln((p_lo - delta) / p_hi)``, or 0 when that is negative or ``p_lo <= delta``.

A view must make outputs repeat: an event is a set of keys seen on the selection part, so a
key that never comes back (free text, an unrounded number) contributes nothing on the test
part. Coarse views (a label, a sequence of labels, a length bucket, whether a record's text
appears) are what the audit can see; several can be given at once.

Why a single event: the selection part already compares the candidates, so testing more
events would only split ``alpha`` further (a union bound over every tested event) for a
bound that is the largest of the tested ones anyway.

The guarantee is in :func:`epsilon_lower_bound`. :func:`epsilon_ceiling` and
:func:`required_runs` say what a number of runs can show at most, so that a contract does not
claim to have audited an epsilon no outcome of its runs could exceed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

Key = Hashable  # one run's output under one view (a tuple, a string)

FORWARD = "D over D'"
BACKWARD = "D' over D"
_SMOOTHING = 0.5  # added to both counts when ordering keys by their ratio
_SHOWN_KEYS = 3  # keys spelled out in AuditBound.event
_KEY_CHARS = 40  # characters of one key's repr in AuditBound.event


@dataclass(frozen=True)
class AuditBound:
    """What the audit found: the bound and the event that gave it, to report or to debug.

    ``epsilon`` is a lower bound, at confidence ``1 - alpha``, on the epsilon of any
    (epsilon, delta)-DP guarantee the method could have for this pair of datasets (0.0: none
    shown). ``p_first`` and ``p_second`` are the event's frequencies on the test parts of
    the runs on D and on D' (in that order whatever the direction), ``runs`` the runs per
    dataset, selection and test parts together.
    """

    epsilon: float
    view: str
    event: str
    direction: str
    p_first: float
    p_second: float
    runs: int


@dataclass(frozen=True)
class _Candidate:
    """An output event chosen on the selection part, with the bound predicted for it."""

    view: str
    direction: str
    keys: frozenset[Key]
    described: str
    predicted: float


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds on a binomial proportion from ``k`` of ``n``.

    Returns ``(lower, upper)``, each holding at level ``alpha`` on its own: P(p < lower) <=
    alpha and P(p > upper) <= alpha. Exact (conservative), so the audit's confidence holds
    at any number of runs, not only asymptotically; ``lower`` is 0 at k = 0 and ``upper``
    is 1 at k = n.
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lower = float(stats.beta.ppf(alpha, k, n - k + 1)) if k > 0 else 0.0
    upper = float(stats.beta.ppf(1.0 - alpha, k + 1, n - k)) if k < n else 1.0
    return lower, upper


def _lower_bounds(k: np.ndarray, n: int, level: float) -> np.ndarray:
    """Clopper-Pearson lower bounds for (possibly fractional) counts ``k`` of ``n``."""
    out = np.zeros(k.shape)
    some = k > 0
    out[some] = stats.beta.ppf(level, k[some], n - k[some] + 1)
    return out


def _upper_bounds(k: np.ndarray, n: int, level: float) -> np.ndarray:
    """Clopper-Pearson upper bounds for (possibly fractional) counts ``k`` of ``n``."""
    out = np.ones(k.shape)
    short = k < n
    out[short] = stats.beta.ppf(1.0 - level, k[short] + 1, n - k[short])
    return out


def _epsilons(p_lo: np.ndarray, p_hi: np.ndarray, delta: float) -> np.ndarray:
    """``ln((p_lo - delta) / p_hi)``, and -inf where ``p_lo <= delta`` (no bound)."""
    out = np.full(p_lo.shape, -math.inf)
    shown = p_lo > delta
    out[shown] = np.log((p_lo[shown] - delta) / p_hi[shown])
    return out


def _describe(keys: Sequence[Key]) -> str:
    """A few keys of an event, then how many it holds: readable in a failed contract."""
    shown = []
    for key in keys[:_SHOWN_KEYS]:
        text = repr(key)
        shown.append(text if len(text) <= _KEY_CHARS else text[: _KEY_CHARS - 3] + "...")
    if len(keys) > _SHOWN_KEYS:
        shown.append(f"... ({len(keys)} keys)")
    return "{" + ", ".join(shown) + "}"


def _best_prefix(
    high: Counter[Key], low: Counter[Key], sizes: tuple[int, int], delta: float, level: float
) -> tuple[list[Key], float]:
    """The prefix set of keys, ordered by the smoothed ratio high/low, with the largest bound.

    ``sizes`` is (runs in the selection part, runs in the test part). The bound of each
    prefix is predicted for the test part: the selection frequencies scaled to the test
    part's size, through the same Clopper-Pearson bounds, so that an event too rare to show
    anything on the test part is not chosen for its ratio alone.
    """
    keys = list(dict.fromkeys([*high, *low]))  # first-seen order: ties are deterministic
    keys.sort(key=lambda key: -(high[key] + _SMOOTHING) / (low[key] + _SMOOTHING))
    selected, tested = sizes
    scale = tested / selected
    k_high = np.cumsum([high[key] for key in keys]) * scale
    k_low = np.cumsum([low[key] for key in keys]) * scale
    predicted = _epsilons(
        _lower_bounds(k_high, tested, level), _upper_bounds(k_low, tested, level), delta
    )
    best = int(np.argmax(predicted))
    return keys[: best + 1], float(predicted[best])


def _selection_size(runs: int, select_fraction: float) -> int:
    """Runs in the selection part; both parts must hold at least one run."""
    selected = int(select_fraction * runs)
    if not 0 < selected < runs:
        raise ValueError(
            f"{runs} runs per dataset leave no selection or no test part at "
            f"select_fraction {select_fraction}"
        )
    return selected


def _check(
    first: Sequence[Mapping[str, Key]],
    second: Sequence[Mapping[str, Key]],
    delta: float,
    alpha: float,
    select_fraction: float,
) -> tuple[list[str], int]:
    """Refuse inputs the guarantee does not cover; return the views and the selection size."""
    if len(first) != len(second):
        raise ValueError(f"need as many runs on D as on D', got {len(first)} and {len(second)}")
    if not 0.0 < select_fraction < 1.0:
        raise ValueError(f"select_fraction must be in (0, 1), got {select_fraction}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    selected = _selection_size(len(first), select_fraction)
    views = list(first[0]) if first else []
    if not views:
        raise ValueError("each run needs at least one view")
    for name, sample in (("D", first), ("D'", second)):
        for index, run in enumerate(sample):
            if set(run) != set(views):
                raise ValueError(f"run {index} on {name} has views {sorted(run)}, not {views}")
    return views, selected


def _candidates(
    first: Sequence[Mapping[str, Key]],
    second: Sequence[Mapping[str, Key]],
    views: list[str],
    sizes: tuple[int, int],
    delta: float,
    level: float,
) -> list[_Candidate]:
    """The best event of each view and direction, chosen on the selection parts only."""
    selected = sizes[0]
    found = []
    for view in views:
        on_first = Counter(run[view] for run in first[:selected])
        on_second = Counter(run[view] for run in second[:selected])
        for direction, high, low in (
            (FORWARD, on_first, on_second),
            (BACKWARD, on_second, on_first),
        ):
            keys, predicted = _best_prefix(high, low, sizes, delta, level)
            found.append(_Candidate(view, direction, frozenset(keys), _describe(keys), predicted))
    return found


def epsilon_lower_bound(
    first: Sequence[Mapping[str, Key]],
    second: Sequence[Mapping[str, Key]],
    *,
    delta: float,
    alpha: float = 0.05,
    select_fraction: float = 0.5,
) -> AuditBound:
    """A lower bound on the epsilon that runs on neighbours D (``first``) and D' show.

    Each run is a mapping from view names (the same in every run) to a hashable key. The
    event is chosen on the first ``select_fraction`` of each sample and tested on the rest
    (module docstring). Guarantee: if the method is (eps, delta)-DP for the pair (D, D'),
    then P(returned epsilon > eps) <= alpha. Proof, for the chosen event S and direction:
    1. S depends on the selection parts only, so given S the test counts are independent
       binomials with means P(S|D) and P(S|D') (the other direction swaps them);
    2. hence p_lo <= P(S|D) and P(S|D') <= p_hi hold together with probability >= 1 - alpha
       (each fails with probability <= alpha/2; union bound), whatever S is;
    3. (eps, delta)-DP gives P(S|D) <= e^eps P(S|D') + delta (either order, the relation
       is symmetric), so then p_lo - delta <= e^eps p_hi, that is the bound is <= eps.
    A run count that cannot show the claimed epsilon even for a deterministic leak makes the
    audit vacuous: see :func:`epsilon_ceiling`.
    """
    views, selected = _check(first, second, delta, alpha, select_fraction)
    runs = len(first)
    tested = runs - selected
    level = alpha / 2.0
    candidates = _candidates(first, second, views, (selected, tested), delta, level)
    chosen = max(candidates, key=lambda candidate: candidate.predicted)  # first on ties
    k_first = sum(run[chosen.view] in chosen.keys for run in first[selected:])
    k_second = sum(run[chosen.view] in chosen.keys for run in second[selected:])
    k_high, k_low = (k_first, k_second) if chosen.direction == FORWARD else (k_second, k_first)
    p_lo = clopper_pearson(k_high, tested, level)[0]
    p_hi = clopper_pearson(k_low, tested, level)[1]
    epsilon = math.log((p_lo - delta) / p_hi) if p_lo > delta else 0.0
    return AuditBound(
        epsilon=max(epsilon, 0.0),
        view=chosen.view,
        event=chosen.described,
        direction=chosen.direction,
        p_first=k_first / tested,
        p_second=k_second / tested,
        runs=runs,
    )


def epsilon_ceiling(
    runs: int, *, delta: float, alpha: float = 0.05, select_fraction: float = 0.5
) -> float:
    """The largest bound :func:`epsilon_lower_bound` can return with ``runs`` per dataset.

    It is reached by a deterministic leak (an event always seen on D, never on D'): with n
    test runs, about ``ln(n / ln(2 / alpha))``. A claimed epsilon at or above it cannot fail
    the audit, whatever the method does, so a contract should use more runs (or say so).
    """
    tested = runs - _selection_size(runs, select_fraction)
    p_lo = clopper_pearson(tested, tested, alpha / 2.0)[0]
    p_hi = clopper_pearson(0, tested, alpha / 2.0)[1]
    return math.log((p_lo - delta) / p_hi) if p_lo > delta else 0.0


def required_runs(
    epsilon: float, *, delta: float, alpha: float = 0.05, select_fraction: float = 0.5
) -> int:
    """The fewest runs per dataset whose :func:`epsilon_ceiling` exceeds ``epsilon``.

    A floor, not an estimate of what an audit needs: it is what a deterministic leak needs;
    a method whose leak is noisy needs many more (docs/results.md, "The empirical audit's
    power").
    """
    if not epsilon >= 0.0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not 0.0 < select_fraction < 1.0:
        raise ValueError(f"select_fraction must be in (0, 1), got {select_fraction}")

    def enough(runs: int) -> bool:
        if not 0 < int(select_fraction * runs) < runs:
            return False  # too few runs to split
        ceiling = epsilon_ceiling(runs, delta=delta, alpha=alpha, select_fraction=select_fraction)
        return ceiling > epsilon

    low, high = 1, 2  # enough(low) is false: one run cannot be split
    while not enough(high):
        if high > 1 << 40:
            raise ValueError(f"no run count shows epsilon {epsilon} at delta {delta}")
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high
