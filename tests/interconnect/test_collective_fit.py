"""collective-fit: the fit recovers known parameters, the timing combines ranks the right way, and the
operations it times are the real collectives (checked on a 3-rank gloo world)."""

import numpy as np
import pytest

from distlab.interconnect.collective_fit import KIB, SIZES, check_collectives, combine, fit_alpha_beta
from distlab.runtime.launcher import launch


def test_fit_recovers_alpha_and_bandwidth_from_exact_model_times():
    """Synthetic times from the closed form t = 2(p-1) alpha + 2(p-1)/p S / B on 3 ranks (written here,
    not taken from distlab.hardware.collectives). Would catch a fit that confuses per-step and per-call latency
    or drops the (p-1)/p factor (B off by 4/3)."""
    alpha, bw, p = 37e-6, 2.5e9, 3
    t = [2 * (p - 1) * alpha + 2 * (p - 1) / p * s / bw for s in SIZES]
    a, b, resid = fit_alpha_beta(SIZES, t, "all-reduce", p)
    assert a == pytest.approx(alpha, rel=1e-9)
    assert b == pytest.approx(bw, rel=1e-9)
    assert np.max(np.abs(resid)) < 1e-9


def test_fit_weights_small_messages_relative_not_absolute():
    """With 10 % multiplicative noise, a relative fit still gets alpha within 15 %. Would catch an
    absolute least-squares fit, which the 64 MiB point dominates (alpha lost in its noise)."""
    rng = np.random.default_rng(0)
    alpha, bw = 50e-6, 1e9
    t = np.array([2 * alpha + s / bw for s in SIZES]) * rng.uniform(0.9, 1.1, len(SIZES))
    a, b, _ = fit_alpha_beta(SIZES, t, "all-reduce", 2)
    assert a == pytest.approx(alpha, rel=0.15)
    assert b == pytest.approx(bw, rel=0.15)


def test_fit_rejects_non_physical_data():
    """Times that fall with size cannot be fitted by a positive alpha and B: say so, do not report nonsense."""
    with pytest.raises(ValueError, match="non-physical"):
        fit_alpha_beta([1e3, 1e6, 1e9], [1.0, 1e-3, 1e-6], "all-reduce", 2)


def test_combine_takes_the_slowest_rank_then_the_best_sample():
    """Sample 0: ranks took 1 and 5 (the collective took 5); sample 1: 3 and 2 (took 3). Best is 3.
    Would catch min-over-ranks (reports 1, faster than the collective) or a mean."""
    per_rank = [{"all-reduce": {KIB: [1.0, 3.0]}}, {"all-reduce": {KIB: [5.0, 2.0]}}]
    assert combine(per_rank) == {"all-reduce": {KIB: 3.0}}


def test_timed_operations_are_the_real_collectives():
    """3 gloo ranks (an odd world on purpose), 101 elements (not divisible by 3). Would catch a timed
    operation that does nothing, gathers into the wrong slots, or broadcasts from the wrong root."""
    out = launch(check_collectives, 3, 101, timeout_s=120)
    for rank in range(3):
        assert out[rank]["all-reduce"] == [6.0] * 101  # 1 + 2 + 3
        assert out[rank]["broadcast"] == [1.0] * 101  # rank 0's value
        assert out[rank]["all-gather"] == [1.0] * 33 + [2.0] * 33 + [3.0] * 33
