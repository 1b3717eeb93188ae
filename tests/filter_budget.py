"""What the ledger's filter charges, for tests that size a budget around a number of jobs.

The filter's orders follow the budget's epsilon (``FilterParams.for_budget``), so "the budget
that admits exactly n jobs" is found by bisection rather than read off one composition."""

from __future__ import annotations

from collections.abc import Sequence

from app.privacy.accounting import Accounting, accountant_for
from app.privacy.events import DatasetEvent
from app.privacy.filter import FilterParams, Item, Release, price


def filter_spend(
    accounting: Accounting,
    budget: float,
    delta: float,
    events: Sequence[DatasetEvent],
    releases: Sequence[Release] = (),
    *,
    batch: bool = False,
) -> float:
    """The ledger's spend of ``events`` (each its own batch, or all one with ``batch``) on a
    budget of (``budget``, ``delta``)."""
    items = [Item(e, "batch" if batch else f"job{i}") for i, e in enumerate(events)]
    params = FilterParams.for_budget(budget, delta)
    return price(params, accountant_for(accounting), items, releases).epsilon


def smallest_budget(
    accounting: Accounting,
    delta: float,
    events: Sequence[DatasetEvent],
    releases: Sequence[Release] = (),
    *,
    batch: bool = False,
) -> float:
    """The smallest budget epsilon (relative precision 1e-6) that admits ``events``."""
    low, high = 1e-3, 1e3
    while high / low > 1 + 1e-6:
        middle = (low * high) ** 0.5
        spend = filter_spend(accounting, middle, delta, events, releases, batch=batch)
        low, high = (low, middle) if spend <= middle else (middle, high)
    return high


def budget_for_exactly(accounting: Accounting, delta: float, event: DatasetEvent, n: int) -> float:
    """A budget that admits ``n`` copies of ``event`` submitted one by one, and not ``n + 1``
    (asserted)."""
    budget = smallest_budget(accounting, delta, [event] * n) * (1 + 1e-5)
    more = filter_spend(accounting, budget, delta, [event] * (n + 1))
    assert more > budget, (n, budget, more)
    return budget
