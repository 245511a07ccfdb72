"""Chapter 7's second derivations (distlab.planner.rules_checks): counted as times, they agree with the chapter's
closed forms, and a shown share or slowdown that is off fails its claim."""

from __future__ import annotations

import math

import pytest

from distlab.core.results import Result
from distlab.planner import rules_checks as rc


@pytest.mark.parametrize("tp, hidden, flops, bus", [(8, 8192, 744.8e12, 456e9), (16, 8192, 744.8e12, 50e9)])
def test_tp_time_counted_equals_the_closed_form(tp, hidden, flops, bus):
    assert rc.tp_overhead_by_times(tp, hidden, flops, bus) == pytest.approx(2 * (tp - 1) * flops / (9 * hidden * bus))


def test_zero3_hiding_point_is_flops_over_link_rate():
    assert rc.zero3_hiding_tokens_by_times(744.8e12, 50e9) == pytest.approx(14896)


def test_source_numbers():
    assert rc.sustained_flops_by_source() == 744.8e12
    assert rc.port_bytes_per_s("InfiniBand-NDR") == 50e9  # 400 Gb/s
    assert rc.port_bytes_per_s("Ethernet-100G") == 12.5e9


def _result(slowdown: float) -> Result:
    r = Result("parallel-rules", kind="computed")
    r.data["compared"] = {
        "moe_best": {"compute": 9.0, "exposed_cp_ep": 1.0},
        "moe_inside": {"compute": 9.5, "exposed_cp_ep": 1.5},
    }
    r.add("moe_inside_slowdown", slowdown, "fraction")
    r.add("moe_a2a_share", 0.1, "fraction")
    return r


def test_a_wrong_slowdown_fails_and_the_right_one_passes():
    good = _result(0.1)
    rc.check_search_figures(good)
    assert not good.failed_claims and len(good.claims) == 2
    bad = _result(11 / 10)  # (11 / 10) instead of 11 / 10 - 1
    rc.check_search_figures(bad)
    assert [c.name for c in bad.failed_claims] == [c.name for c in bad.claims if "slowdown" in c.name]
    assert math.isclose(bad.failed_claims[0].expected, 0.1)
