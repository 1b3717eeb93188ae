"""The one printing rule for ε, δ and shares (app/privacy/display.py): truncated to 4 (ε) and
3 (δ) significant digits within a relative 1e-9, never rounded up (issue 55, item 3)."""

from __future__ import annotations

import math

import pytest

from app.privacy.budget import spend_text
from app.privacy.display import budget_percent, delta_text, distinct_epsilons, epsilon_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.9999999934211357, "1.999"),  # a job planned for epsilon 2 (issue 55: "1.999" / "2")
        (1.79567, "1.795"),  # a remainder: never more than is left (issue 55: 1.795 / 1.796)
        (7.9996, "7.999"),
        (2.0, "2"),
        (0.3, "0.3"),
        (0.1 + 0.2, "0.3"),  # 0.30000000000000004: its float noise is not a digit
        (0.04999999999, "0.05"),  # a count release's share, within the tolerance
        (0.000123456, "0.0001234"),
        (1.234e-5, "1.234e-5"),  # no padded exponent, as a δ prints
        (12345.6, "12340"),
        (0.0, "0"),
        (math.inf, "inf"),
    ],
)
def test_an_epsilon_is_truncated_to_four_digits(value: float, text: str) -> None:
    assert epsilon_text(value) == text
    assert spend_text(value) == text  # the older name is the same rule


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-6, "1e-6"),
        (2.05e-6, "2.05e-6"),
        (1e-6 + 1e-6 + 5e-8, "2.05e-6"),  # a plain sum's delta, summed in floats
        (0.00014450867052023122, "1.44e-4"),
        (3 * 1e-5, "3e-5"),  # 3.0000000000000004e-05
        (0.001, "0.001"),
        (0.0123456, "0.0123"),
        (0.5, "0.5"),
    ],
)
def test_a_delta_is_truncated_to_three_digits(value: float, text: str) -> None:
    assert delta_text(value) == text


def test_no_printed_figure_is_above_its_value() -> None:
    """Truncation, for every figure: a remainder never reads more than is left, and a spend
    never reads as a threshold it is below."""
    for value in (1.79567, 0.99999, 9.99951, 0.00123456789, 1234.56789, 5.5e-7):
        assert float(epsilon_text(value)) <= value
        assert float(delta_text(value)) <= value
    assert budget_percent(0.7999) == "79%" and budget_percent(0.001) == "<1%"


def test_two_different_figures_never_print_alike() -> None:
    assert distinct_epsilons(2.00041, 2.00037) == ("2.0004", "2.0003")
    assert distinct_epsilons(3.5, 1.25) == ("3.5", "1.25")
    assert distinct_epsilons(2.0, 2.0) == ("2", "2")
