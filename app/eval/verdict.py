"""One verdict for a measured accuracy against a baseline: ahead, behind, or cannot tell.

Why one. A prompt's validation verdict, the prompt lists' ``beats_zero_shot``, advice's
recommendation, ``dpsyn prompts list`` and the dashboard each compared a score with its
baseline in their own way (a plain ``>``; "cannot tell" for a lead within the noise but never
for a deficit; one standard error on one page, two in the advice), so one prompt read
``"beats_zero_shot": true`` beside "cannot tell on 48 records", and a deficit of 3 records in
48 was stated as a fact. Every one of them now asks :func:`verdict`, so they cannot disagree.

Confidence. A difference is a verdict only when it is larger than :data:`Z` = 2 standard
errors of the measured accuracy: about 95 % two-sided under the normal approximation (1.96
rounded up). Inside that margin the answer is "cannot tell", whichever the sign: a lead and a
deficit of the same size are the same evidence. Where the spread was not measured (advice
with one seed, a score without its record count) the answer is "cannot tell" too.

The standard error is the caller's, because what varies differs: a validation score is one
prompt on ``n`` records (:func:`binomial_se`); advice's mean over seeds adds their spread.
The baseline is scored on the same records and its own sampling is not added: on the same
records the two are paired, and the pairing (which records each got right) is not kept.

This module imports nothing of the project, so the API's schemas, the evaluation and the
command line can all use it without an import cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

Z = 2.0
"""Standard errors a difference must exceed to be a verdict (about 95 %, two-sided)."""

CONFIDENCE = "two standard errors (about 95%)"
"""How :data:`Z` is said in help texts and documents."""


class Outcome(StrEnum):
    """The three verdicts; the value is what the API sends, :attr:`words` what people read."""

    AHEAD = "ahead"
    BEHIND = "behind"
    CANNOT_TELL = "cannot_tell"

    @property
    def words(self) -> str:
        return self.value.replace("_", " ")


@dataclass(frozen=True)
class Verdict:
    """A score against a baseline at :data:`Z` standard errors."""

    outcome: Outcome
    lead: float
    """Score minus baseline (negative: a deficit)."""
    margin: float
    """:data:`Z` standard errors: the difference the measurement can carry (inf: no spread
    was measured)."""

    def factor(self) -> float | None:
        """How many times more data (records, or queries and seeds) would make a difference of
        this size, if it held, exactly :data:`Z` standard errors: (margin / lead)^2, since a
        standard error falls as the square root of its count. None when nothing would (no
        difference, or no measured spread to scale)."""
        if self.lead == 0 or math.isinf(self.margin):
            return None
        return (self.margin / self.lead) ** 2


def verdict(score: float, baseline: float, se: float | None) -> Verdict:
    """``score`` against ``baseline``: ahead or behind when the difference exceeds :data:`Z`
    standard errors ``se`` (about 95 %), cannot tell otherwise, and when ``se`` is None (the
    spread was not measured)."""
    lead = score - baseline
    if se is None or math.isnan(se):
        return Verdict(Outcome.CANNOT_TELL, lead, math.inf)
    margin = Z * se
    if lead > margin:
        return Verdict(Outcome.AHEAD, lead, margin)
    if lead < -margin:
        return Verdict(Outcome.BEHIND, lead, margin)
    return Verdict(Outcome.CANNOT_TELL, lead, margin)


def binomial_se(accuracy: float, n: int) -> float:
    """Standard error of an accuracy over ``n`` records (binomial). The per-record variance
    is floored at 1/n, so that 0 or 1 right answers in n (variance 0 as measured) still leave
    a margin: four records all right do not prove a prompt perfect."""
    variance = max(accuracy * (1.0 - accuracy), 1.0 / n)
    return math.sqrt(variance / n)
