"""nccl-tests' factors and the reading of a printed sweep (distlab.interconnect.nccl_tests_reading)."""

import copy

import pytest

from distlab.core.results import Result
from distlab.interconnect.nccl_tests_checks import check_columns
from distlab.interconnect.nccl_tests_reading import (
    data_factor,
    formula_factor,
    half_bandwidth_bytes,
    sweep,
)


def test_formula_factor_evaluates_the_printed_text():
    """2*(n-1)/n at n = 3 is 4/3, (n-1)/n at 7 is 6/7; anything but arithmetic in n is refused."""
    assert formula_factor("2*(n-1)/n", 3) == pytest.approx(4 / 3)
    assert formula_factor("(n-1)/n", 7) == pytest.approx(6 / 7)
    assert formula_factor("1", 5) == 1.0
    with pytest.raises(ValueError):
        formula_factor("__import__('os')", 2)


@pytest.mark.parametrize(("entry", "n", "expected"), [("busbw-allreduce", 5, 1.6), ("busbw-alltoall", 4, 0.75)])
def test_data_factor_by_hand(entry, n, expected):
    """PERFORMANCE.md: all-reduce 2(n-1)/n = 8/5 at 5 ranks, all-to-all (n-1)/n = 3/4 at 4 (typed here)."""
    assert data_factor(entry, n) == pytest.approx(expected)


def test_half_bandwidth_interpolates_in_log_size():
    """busbw 1, 2, 4, 8 at sizes 1, 10, 100, 1000: half of 8 is reached exactly at the third point."""
    assert half_bandwidth_bytes([1, 10, 100, 1000], [1, 2, 4, 8]) == pytest.approx(100)
    assert half_bandwidth_bytes([1, 10, 100], [1, 2, 5]) == pytest.approx(10 ** (1 + 0.5 / 3))


def test_a_mistyped_row_breaks_the_column_checks():
    """One busbw digit changed in the published 8 x H100 sweep must fail a claim (what catches a transcription
    error in nccl_tests.toml)."""
    row = copy.deepcopy(sweep("dgxc-h100-8gpu-all-reduce"))
    ok = Result("x")
    check_columns(ok, "s", row)
    assert all(c.passed for c in ok.claims)
    row["busbw_gbps"][20] += 1.0
    bad = Result("y")
    check_columns(bad, "s", row)
    assert any(not c.passed for c in bad.claims)


def test_a_size_typed_twice_as_large_breaks_the_doubling():
    """nccl-tests -f 2 doubles each size: one size typed x2 must fail the doubling claim, and nothing else needs to."""
    row = copy.deepcopy(sweep("dgxc-h100-8gpu-all-reduce"))
    row["bytes"][19] *= 2
    bad = Result("z")
    check_columns(bad, "s", row)
    failed = [c.name for c in bad.claims if not c.passed]
    assert "s: each size is twice the one before, every row" in failed
