"""The percentage of a budget people read (CLI ``budget show``, the dashboard's bars): it must
agree with the warn level it is printed beside."""

from __future__ import annotations

import pytest

from app.privacy.budget import budget_percent
from app.services.budgets import SpendLevel, spend_level


@pytest.mark.parametrize(
    ("fraction", "shown"),
    [
        (0.0, "0%"),
        (1e-6, "<1%"),
        (0.0099, "<1%"),
        (0.01, "1%"),
        (0.29, "29%"),  # 28.999999999999996 in floats
        (0.7998, "79%"),  # quickstart's 7.998 of 10: was "80%" beside "warns at 80%"
        (0.8, "80%"),
        (1.0, "100%"),
        (1.234, "123%"),
    ],
)
def test_whole_percent_rounded_down(fraction, shown):
    assert budget_percent(fraction) == shown


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9])
@pytest.mark.parametrize("spent", [7.998, 7.9999999, 8.0, 8.0000001, 4.99, 5.0, 8.99, 9.0])
def test_the_percentage_reaches_the_threshold_exactly_when_the_level_warns(threshold, spent):
    total = 10.0
    level = spend_level(spent, total, threshold)
    shown = int(budget_percent(spent / total).rstrip("%"))
    assert (shown >= round(threshold * 100)) is (level is not SpendLevel.OK)
