"""The one verdict (issue 55, item 1): ahead, behind or cannot tell at two standard errors,
the same for leads and deficits, and the issue's own numbers."""

from __future__ import annotations

import math

import pytest

from app.eval.verdict import Outcome, Z, binomial_se, verdict


@pytest.mark.parametrize(
    ("score", "baseline", "se", "outcome"),
    [
        (0.60, 0.50, 0.04, Outcome.AHEAD),  # +0.10 beyond ±0.08
        (0.55, 0.50, 0.04, Outcome.CANNOT_TELL),  # a lead within the margin
        (0.45, 0.50, 0.04, Outcome.CANNOT_TELL),  # a deficit within it: the same evidence
        (0.40, 0.50, 0.04, Outcome.BEHIND),  # -0.10 beyond it
        (0.50, 0.50, 0.04, Outcome.CANNOT_TELL),  # a tie
        (0.90, 0.10, None, Outcome.CANNOT_TELL),  # no measured spread: no verdict
    ],
)
def test_two_standard_errors_either_way(score, baseline, se, outcome) -> None:
    judged = verdict(score, baseline, se)
    assert judged.outcome is outcome
    assert judged.lead == pytest.approx(score - baseline)
    assert judged.margin == (math.inf if se is None else Z * se)


def test_the_margin_is_two_standard_errors_exactly() -> None:
    assert Z == 2.0
    assert verdict(0.5 + 0.0801, 0.5, 0.04).outcome is Outcome.AHEAD
    assert verdict(0.5 + 0.0799, 0.5, 0.04).outcome is Outcome.CANNOT_TELL
    assert verdict(0.5 - 0.0799, 0.5, 0.04).outcome is Outcome.CANNOT_TELL
    assert verdict(0.5 - 0.0801, 0.5, 0.04).outcome is Outcome.BEHIND


def test_the_issues_numbers() -> None:
    """0.396 against zero-shot's 0.458 on 48 records (3 records) was stated as a fact; 0.292
    (8 records behind) is one; a lead of +0.042 on 48 is not."""
    assert verdict(0.396, 0.458, binomial_se(0.396, 48)).outcome is Outcome.CANNOT_TELL
    assert verdict(0.292, 0.458, binomial_se(0.292, 48)).outcome is Outcome.BEHIND
    assert verdict(0.5, 0.458, binomial_se(0.5, 48)).outcome is Outcome.CANNOT_TELL
    assert 2 * binomial_se(0.396, 48) == pytest.approx(0.141, abs=5e-4)


def test_the_binomial_error_never_vanishes() -> None:
    """Four records all right have zero variance as measured; the floor keeps a margin."""
    assert binomial_se(1.0, 4) == pytest.approx(math.sqrt(1 / 16))
    assert verdict(1.0, 0.75, binomial_se(1.0, 4)).outcome is Outcome.CANNOT_TELL
    assert binomial_se(0.5, 100) == pytest.approx(0.05)


def test_the_factor_scales_a_difference_to_the_margin() -> None:
    """More data by this factor would make a difference of the same size exactly 2 SE."""
    judged = verdict(0.438, 0.417, binomial_se(0.438, 48))
    assert math.ceil(48 * (judged.factor() or 0)) == 2233  # the figure validation says
    grown = verdict(0.438, 0.417, binomial_se(0.438, 2233))
    assert grown.margin == pytest.approx(abs(grown.lead), rel=1e-3)
    assert verdict(0.5, 0.5, 0.1).factor() is None and verdict(0.6, 0.5, None).factor() is None


def test_the_words_and_the_values() -> None:
    assert [o.value for o in Outcome] == ["ahead", "behind", "cannot_tell"]
    assert Outcome.CANNOT_TELL.words == "cannot tell"
