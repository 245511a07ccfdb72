"""The whiteboard spec: two significant figures for the round-number derivations of the practice pages."""

import pytest

from distlab.core.formatting import format_quantity, whiteboard


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (1.1203e12, "B", "1.1 TB"),
        (3.2049, "", "3.2"),
        (2.38, "", "2.4"),
        (15.83, "days", "16 days"),
        (0.5172, "fraction", "52 %"),
        (0.00123, "s", "1.2 ms"),
        (97.4, "GB", "97 GB"),
        (123456, "tokens", "120,000 tokens"),
        (9.62e11, "FLOP", "960 GFLOP"),
        (-0.0457, "", "-0.046"),
        (5.96e23, "FLOP", "6.0e+23 FLOP"),
    ],
)
def test_whiteboard_two_significant_figures(value, unit, expected):
    """Would catch three figures (a page's '3.20x' where the derivation says 3.2x) or a unit left unscaled."""
    assert whiteboard(value, unit) == expected
    assert format_quantity(value, unit, "~") == expected


def test_whiteboard_keeps_odd_values_readable():
    """A NaN or a bool is shown as format_quantity shows it, never rounded into a number."""
    assert whiteboard(True) == "yes"
    assert whiteboard(float("nan"), "B") == format_quantity(float("nan"), "B")
