"""One rule for printing privacy figures: every ε, δ and share of a budget that a person reads,
in the CLI, in the API's text fields (messages, notes) and on the dashboard (Jinja filters).

Pure functions, no I/O. The rule (docs/privacy.md, "How figures are printed"): a figure is
*truncated* to a fixed number of significant digits, never rounded up, within a relative
:data:`TOLERANCE` for the last bits of a float:

* an ε (planned, charged, spent, composed, plain sum, remaining, a budget): 4 significant
  digits (:func:`epsilon_text`), so 1.99999 reads ``1.999`` and 0.000123456 ``0.0001234``;
* a δ: 3 significant digits, in scientific notation without padding below 0.001
  (:func:`delta_text`): ``1e-6``, ``2.05e-6``, ``0.01``;
* a share of a budget: a whole percent (:func:`budget_percent`), ``<1%`` for a spend above 0.

Why truncation, for every figure alike: every printed digit is a digit of the value, so one
value prints the same wherever it is shown (the job page, the jobs table, ``dpsyn jobs get``);
a remaining budget never reads more than is left, and a spend never reads as reaching a
threshold it is below (a spend of 7.9996 of 10 reads "7.999 (79%)", never "8 (79%)"); and a
spend plus its remainder never print more than the budget. Whether a cost fits is decided on
the exact values and said in words ("fits", "does not fit"); where two different figures
would print alike, :func:`distinct_epsilons` prints more digits. A value advised to be *typed*
(the smallest budget or δ that fits) is rounded up before it is printed
(:func:`app.privacy.budget.round_up`) so that typing it works; that is the one exception.
"""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Decimal

#: Relative slack: a value within this of the next printed step prints as that step, so a
#: count release priced at 0.05 of a budget (0.04999999999 after its float arithmetic) reads
#: 0.05. The same tolerance the ledger's budget check allows (``FIT_TOLERANCE``).
TOLERANCE = 1e-9

#: Significant digits of an ε and of a δ.
EPSILON_DIGITS = 4
DELTA_DIGITS = 3

#: Most significant digits :func:`distinct_epsilons` goes to.
_MOST_DIGITS = 12


def _truncated(value: float, digits: int) -> float:
    """``value`` (positive, finite) cut to ``digits`` significant digits, within
    :data:`TOLERANCE`. In decimal, from the double's exact value: 2.0 stays 2.0, and a
    subnormal δ is cut as any other."""
    exact = Decimal(value) * (1 + Decimal(TOLERANCE))
    quantum = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    return float(exact.quantize(quantum, rounding=ROUND_FLOOR))


def epsilon_text(epsilon: float, digits: int = EPSILON_DIGITS) -> str:
    """An ε for people to read: ``digits`` (4) significant digits, truncated, without
    trailing zeros (2.0 reads ``2``). Zero, a negative value and a non-finite one print as
    Python's ``g`` format prints them (``0``, ``inf``)."""
    if epsilon <= 0 or not math.isfinite(epsilon):
        return f"{epsilon:g}"
    # at least 6 digits of "g", so that a cut value prints whole (12340, not 1.234e+04)
    text = f"{_truncated(epsilon, digits):.{max(digits, 6)}g}"
    if "e" in text:  # below 1e-4: the digits, not the padding of "e-05"
        mantissa, exponent = text.split("e")
        return f"{mantissa}e{int(exponent)}"
    return text


def delta_text(delta: float) -> str:
    """A δ for people to read: 3 significant digits, truncated; below 0.001 in scientific
    notation without padding (``1e-6``, ``1.44e-4``, not ``1e-06`` nor
    ``0.00014450867052023122``: a δ's later digits carry no meaning for a reader)."""
    if delta <= 0 or not math.isfinite(delta):
        return f"{delta:g}"
    value = _truncated(delta, DELTA_DIGITS)
    if value < 1e-3:
        mantissa, exponent = f"{value:.{DELTA_DIGITS - 1}e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.{DELTA_DIGITS}g}"


def budget_percent(fraction: float) -> str:
    """A share of a budget as a whole percentage for people to read: truncated, so that a
    spend below a warn threshold never prints as the threshold itself (a spend of 79.98%
    beside "warns at 80%" reads "79%"), within :data:`TOLERANCE`; a spend that is not zero
    never reads "0%"."""
    if 0 < fraction < 0.01:
        return "<1%"
    return f"{math.floor(fraction * 100 * (1 + TOLERANCE))}%"


def distinct_epsilons(first: float, second: float) -> tuple[str, str]:
    """Two different ε (a cost and the remainder it exceeds) as texts that differ: 4 digits
    where those differ, else as many more as it takes (a cost of 2.00041 against 2.00037
    left reads "2.0004" and "2.0003", not "2" and "2"). Equal values print alike."""
    for digits in range(EPSILON_DIGITS, _MOST_DIGITS + 1):
        texts = epsilon_text(first, digits), epsilon_text(second, digits)
        if texts[0] != texts[1]:
            return texts
    return epsilon_text(first), epsilon_text(second)
