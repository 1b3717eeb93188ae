"""One rule for what an epsilon is, and one for when a cost fits a budget.

The API, the services, the ledger and the CLI all check both; kept here so that a budget the
API accepts is one the ledger can admit against, with the same tolerance everywhere.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field

EPSILON_RULE = "must be a positive finite number"
# Relative slack of a budget check: a composition computed twice (admission, then a budget
# change) may differ in the last bits, which must not turn "exactly the budget" into "over".
FIT_TOLERANCE = 1e-9

# A request's epsilon: strict, so JSON true is not an epsilon of 1, nor "2" one of 2.
Epsilon = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]


def is_epsilon(value: float) -> bool:
    """Whether ``value`` is a usable epsilon: positive and finite (NaN is not)."""
    return value > 0 and math.isfinite(value)


def fits_budget(cost: float, total: float) -> bool:
    """Whether a spend of ``cost`` stays within a budget of ``total`` epsilon."""
    return not cost > total * (1 + FIT_TOLERANCE)


def budget_percent(fraction: float) -> str:
    """A share of a budget as a whole percentage for people to read: rounded down, so that a
    spend below a warn threshold never prints as the threshold itself (a spend of 79.98% beside
    "warns at 80%" reads "79%"), within the same tolerance as the levels; a spend that is not
    zero never reads "0%"."""
    if 0 < fraction < 0.01:
        return "<1%"
    return f"{math.floor(fraction * 100 * (1 + FIT_TOLERANCE))}%"
