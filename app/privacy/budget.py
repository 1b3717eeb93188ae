"""One rule for what an epsilon is, and one for when a cost fits a budget.

The API, the services, the ledger and the CLI all check both; kept here so that a budget the
API accepts is one the ledger can admit against, with the same tolerance everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from typing import Annotated

from pydantic import Field

# Printing lives in app.privacy.display (one rule for every ε, δ and share a person reads);
# spend_text is its epsilon_text under the name the CLI and the ledger have long used.
from app.privacy.display import TOLERANCE, epsilon_text
from app.privacy.display import budget_percent as budget_percent

EPSILON_RULE = "must be a positive finite number"
# Relative slack of a budget check: a composition computed twice (admission, then a budget
# change) may differ in the last bits, which must not turn "exactly the budget" into "over".
FIT_TOLERANCE = TOLERANCE

spend_text = epsilon_text

# A request's epsilon: strict, so JSON true is not an epsilon of 1, nor "2" one of 2.
Epsilon = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]


def is_epsilon(value: float) -> bool:
    """Whether ``value`` is a usable epsilon: positive and finite (NaN is not)."""
    return value > 0 and math.isfinite(value)


def fits_budget(cost: float, total: float) -> bool:
    """Whether a spend of ``cost`` stays within a budget of ``total`` epsilon (a NaN never
    does: fail closed)."""
    return cost <= total * (1 + FIT_TOLERANCE)


def round_up(value: float, digits: int) -> float:
    """``value`` rounded up to ``digits`` significant digits (an epsilon or a delta to advise:
    rounding up keeps one that fits one that fits). Exact for any positive double, subnormals
    included."""
    if not (math.isfinite(value) and value > 0):
        return value
    nearest = float(f"{value:.{digits - 1}e}")  # the double of 3.2e-12 stays 3.2e-12
    if nearest >= value:
        return nearest
    exact = Decimal(value)
    quantum = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    # The decimal is at least ``value``, a double, so its nearest double is too.
    return float(exact.quantize(quantum, rounding=ROUND_CEILING))


# log(1/5e-324) is about 745: 30 halvings of log(delta) leave 7e-7, a relative error far
# below the two digits advised.
_BISECTION_STEPS = 30


def smallest_fitting_delta(
    epsilon_at: Callable[[float], float], epsilon: float, *, above: float
) -> float | None:
    """The smallest delta in (``above``, 1), to two significant digits (rounded up), at which a
    spend priced by ``epsilon_at`` fits a budget of ``epsilon``; None if no delta below 1 makes
    it fit. ``epsilon_at`` must not grow with delta (no accountant's epsilon does), and is
    asked some 30 times: a bisection on log(delta), from ``above`` (whose spend does not fit
    or is unknown) to the largest double below 1."""
    top = math.nextafter(1.0, 0.0)
    if not fits_budget(epsilon_at(top), epsilon):
        return None
    found, low, high = top, math.log(above), math.log(top)
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        candidate = math.exp(middle)
        if fits_budget(epsilon_at(candidate), epsilon):
            found, high = candidate, middle
        else:
            low = middle
    advised = round_up(found, 2)
    fits = advised < 1 and fits_budget(epsilon_at(advised), epsilon)
    return advised if fits else found


def percent_text(fraction: float) -> str:
    """A threshold (a fraction) as a percent, to the digits it has: 0.8 is "80%", 0.125
    "12.5%"."""
    return f"{round(fraction * 100, 6):g}%"


def warn_fraction(percent: float) -> float:
    """The API's warn threshold (a fraction) for ``percent`` typed in percent, as the CLI's
    ``--warn`` and the dashboard's field take it, or ValueError naming the rule. A value
    below 1 is refused rather than read as under 1 %: the API and the docs write the
    threshold as a fraction (0.8), and ``--warn 0.8`` once meant 0.8 % silently."""
    if not 0 < percent <= 100:
        raise ValueError(f"a percent in (0, 100], got {percent:g}")
    if percent < 1:
        raise ValueError(
            f"a percent, and {percent:g} would flag the budget at {percent:g} % spent; for "
            f"{percent * 100:g} %, give {percent * 100:g}"
        )
    return percent / 100
