"""The candidate causes of per-GPU throughput lost with N (distlab.planner.scale_causes): the added step seconds and
their ratios against hand arithmetic on an awkward series, and the jitter solve against chapter 10's numpy order
statistic."""

import math

import pytest

from distlab.planner.scale_causes import SeriesEnds, coefficient_of_variation, jitter_for_loss, ratios
from distlab.throughput import stragglers


def _series(**kw):
    base = dict(
        gpus_first=97,
        gpus_last=257,
        tokens_per_s_per_gpu_first=10_000.0,
        tokens_per_s_per_gpu_last=8_000.0,
        tokens_per_gpu_per_step=12_288.0,
        layers=33,
        params_billion=6.5,
        microbatches=3.0,
    )
    return SeriesEnds(**(base | kw))


def test_added_seconds_and_ratios_match_hand_arithmetic():
    """12,288 tokens at 10,000 then 8,000 tokens/s: 1.2288 s then 1.536 s, 0.3072 s added. Would catch the step taken
    from the wrong end, the micro-batches left out of the per-byte and per-step ratios, or ranks instead of ranks
    added."""
    s = _series()
    assert s.step_first_seconds == pytest.approx(1.2288, rel=1e-12)
    assert s.added_seconds == pytest.approx(0.3072, rel=1e-12)
    got = ratios(s)
    assert got["stragglers"] == pytest.approx(0.25, rel=1e-12)
    assert got["latency"] == pytest.approx(0.3072 / (33 * 3 * 160), rel=1e-12)
    assert got["bandwidth"] == pytest.approx(0.3072 / (6.5 * 3), rel=1e-12)


def test_the_planner_s_own_added_seconds_are_not_counted_as_missed():
    """0.1 s of the 0.3072 s priced by the planner leaves 0.2072 s for the causes. Would catch the planner's part
    added instead of subtracted, or left in one ratio only."""
    s = _series(planner_added_seconds=0.1)
    assert s.missed_seconds == pytest.approx(0.2072, rel=1e-12)
    got = ratios(s)
    assert got["stragglers"] == pytest.approx(0.2072 / 1.2288, rel=1e-12)
    assert got["latency"] == pytest.approx(0.2072 / (33 * 3 * 160), rel=1e-12)
    assert got["bandwidth"] == pytest.approx(0.2072 / (6.5 * 3), rel=1e-12)


def test_coefficient_of_variation():
    """Population spread: [1, 3] has mean 2 and standard deviation 1. Would catch the sample (n - 1) formula."""
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(0.5, rel=1e-12)
    assert coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0


@pytest.mark.parametrize(("jitter", "ratio", "n1", "n2"), [(0.05, 0.97, 97, 257), (0.13, 0.99, 128, 2048)])
def test_jitter_for_loss_inverts_the_order_statistic(jitter, ratio, n1, n2):
    """Price a loss with chapter 10's numpy E[Z_(N)], then solve it back. Would catch E1 and E2 swapped or the
    default ratio applied on the wrong side."""
    e1, e2 = stragglers.expected_max_standard_normal(n1), stragglers.expected_max_standard_normal(n2)
    loss = 1 - ratio * (1 + jitter * e1) / (1 + jitter * e2)
    assert jitter_for_loss(loss, ratio, n1, n2) == pytest.approx(jitter, rel=1e-8)


def test_a_loss_no_jitter_reaches_is_infinite():
    """E[Z] grows like sqrt(2 ln N): from 128 to 2048 ranks no jitter loses 60 %. Would catch a negative jitter."""
    assert math.isinf(jitter_for_loss(0.6, 1.0, 128, 2048))
