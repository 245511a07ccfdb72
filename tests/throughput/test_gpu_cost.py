"""Prices and dollars (distlab.throughput.gpu_cost) against the rows of gpu_prices.toml typed here."""

import pytest

from distlab.core.results import Result
from distlab.throughput.gpu_cost import add_usd, dollars, price, usd


def test_median_of_on_demand_rows():
    """H100 SXM on-demand: 3.78 (Lambda), 3.9492 (Modal), 5.49 (Replicate), 4.76 (RunPod), 98.32 / 8 (AWS): the
    median is 4.76; spot 2.69 and the survey's 1.99-5.00 are in the range, not the median. Would catch spot rows in
    the median or an instance price not divided by its GPUs (12.29 would be the high end either way)."""
    p = price("H100-SXM")
    assert p.usd_per_gpu_hour == pytest.approx(4.76)
    assert p.low == pytest.approx(1.99) and p.high == pytest.approx(98.32 / 8)
    assert len(p.rows) == 5 and p.first_date == "2026-Q1"


def test_given_price_and_no_price():
    p = price("H100-SXM", 2.0)
    assert p.usd_per_gpu_hour == 2.0 and p.basis == "given"
    with pytest.raises(ValueError, match="no sourced"):
        price("B200")
    with pytest.raises(ValueError, match="positive"):
        price("H100-SXM", -1.0)


def test_dollars_and_formatting():
    p = price("A100-SXM-80GB", 2.5)
    assert dollars(1000, p) == 2500
    assert usd(1.657e6) == "$1.66 M" and usd(999) == "$999" and usd(3.2) == "$3.20"
    r = Result("x")
    add_usd(r, "a", 3.34e6, "")
    assert (r.quantities["a"].value, r.quantities["a"].unit) == (3.34, "million USD")
