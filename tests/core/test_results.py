"""Claims, quantities and their formatting: the vocabulary every page is built from."""

import math

import pytest

from distlab.core.formatting import format_quantity
from distlab.core.results import Claim, Result


def test_exact_claim_rejects_any_difference():
    """Would catch a tolerance silently applied to claims declared exact."""
    assert Claim("x", 16, 16).passed
    assert not Claim("x", 16.000001, 16).passed
    assert Claim("x", 16.000001, 16).tolerance_text() == "exact"


def test_relative_and_absolute_tolerance():
    assert Claim("x", 10.5, 10, rel_tol=0.05).passed
    assert not Claim("x", 10.6, 10, rel_tol=0.05).passed
    assert Claim("x", 0.009, 0, abs_tol=0.01).passed
    assert not Claim("x", 0.011, 0, abs_tol=0.01).passed


def test_bounds():
    """A measured point above its ceiling must fail; at the ceiling it passes."""
    assert Claim("below ceiling", 5, 5, relation="<=").passed
    assert not Claim("below ceiling", 5.1, 5, relation="<=").passed
    assert Claim("floor", 3, 2, relation=">=").passed
    assert not Claim("floor", 1, 2, relation=">=").passed


def test_nan_never_passes():
    assert not Claim("x", float("nan"), 1, rel_tol=1.0).passed


def test_bad_relation_is_rejected():
    with pytest.raises(ValueError, match="relation"):
        Claim("x", 1, 1, relation="~")


def test_describe_names_both_values_and_tolerance():
    text = Claim("bytes", 17, 16, unit="B/param").describe()
    assert "17 B/param" in text and "16 B/param" in text and "exact" in text


@pytest.mark.parametrize(
    ("value", "unit", "spec", "expected"),
    [
        (107_814_649_856, "B", "", "108 GB"),
        (16, "B/param", "", "16 B/param"),
        (0.75, "fraction", "", "75 %"),
        (4.2e13, "FLOP/s", "", "42 TFLOP/s"),
        (0.0025, "s", "", "2.5 ms"),
        (6_738_415_616, "params", "value", "6,738,415,616"),
        (2 * 2**30, "B", "GiB", "2 GiB"),
        (107_814_649_856, "B", "GB", "107.8 GB"),
    ],
)
def test_format_quantity(value, unit, spec, expected):
    assert format_quantity(value, unit, spec) == expected


def test_result_round_trips_through_json():
    """Would catch a cache that loses claims, tables or quantities."""
    r = Result("demo")
    r.add("a", 3.5, "B", "three and a half bytes")
    r.claim("c", 1.0, 1.0, rel_tol=0.1)
    r.table("t", ["x", "y"], [[1, "two"]])
    back = Result.from_json(r.to_json(), {})
    assert back.quantities == r.quantities
    assert back.claims == r.claims
    assert back.tables["t"].rows == [[1, "two"]]


def test_a_name_added_twice_raises():
    """Would catch the chapter 12 bug: the planner added `long_seq` twice (16,384 and 131,072) and the page
    silently showed the second under the first one's meaning."""
    from distlab.core.results import DuplicateName

    r = Result("exp")
    r.add("long_seq", 16384, "tokens")
    with pytest.raises(DuplicateName, match="long_seq"):
        r.add("long_seq", 131072, "tokens")
    r.table("t", ["a"], [[1]])
    with pytest.raises(DuplicateName, match="table 't'"):
        r.table("t", ["a"], [[2]])
    r.claim("c", 1, 1)
    with pytest.raises(DuplicateName, match="claim 'c'"):
        r.claim("c", 2, 2)


def test_worst_relative_gap_fails_on_a_missing_cell_wherever_it_sits():
    """The largest |a - b| / |b| (|a| where b is 0); a NaN anywhere, or nothing at all, is infinite, so a claim of
    "every cell equals its reference" can never pass by skipping one (max() alone keeps 0.1 over a later NaN)."""
    from distlab.core.results import worst_relative_gap

    assert worst_relative_gap([(1.1, 1.0), (3.0, 3.0), (0.25, 0.0)]) == pytest.approx(0.25, rel=1e-12)
    assert worst_relative_gap([(2.0, 2.0), (-4.0, -4.0)]) == 0.0
    assert worst_relative_gap([(1.1, 1.0), (math.nan, 2.0)]) == math.inf
    assert worst_relative_gap([(math.nan, 2.0), (1.1, 1.0)]) == math.inf
    assert worst_relative_gap([]) == math.inf
