"""Throughput debugging: stragglers against published order statistics, the spot simulator against
renewal-process closed forms, the DataLoader model against a real loader, and profile-step's helpers."""

import math

import numpy as np
import pytest

from distlab.throughput import dataloader_starvation as dl
from distlab.throughput import elastic, stragglers
from distlab.throughput.profile_step import _is_comm

# Expected largest of N standard normals (Tippett 1925; Harter 1961, "Expected values of normal order
# statistics", Biometrika 48). N = 2 and 3 have closed forms: 1/sqrt(pi) and 3/(2 sqrt(pi)).
PUBLISHED = {
    1: 0.0,
    2: 1 / math.sqrt(math.pi),
    3: 1.5 / math.sqrt(math.pi),
    4: 1.02938,
    5: 1.16296,
    10: 1.53875,
    100: 2.50759,
}


@pytest.mark.parametrize("n,value", PUBLISHED.items())
def test_expected_max_of_normals_matches_published_tables(n, value):
    """Would catch an integrand with Phi^n instead of n phi Phi^(n-1), or a grid too coarse for the tail."""
    assert stragglers.expected_max_standard_normal(n) == pytest.approx(value, abs=2e-5)


def test_simulated_steps_match_order_statistics_and_hiccups():
    """5 ranks (awkward), many steps: the mean max lies within 4 standard errors of mu + sigma E[Z_(5)].
    Would catch a simulation that averages over ranks instead of taking the max."""
    rng = np.random.default_rng(3)
    t = stragglers.simulate_steps(5, 100_000, rng, jitter=0.05)
    se = t.std(ddof=1) / math.sqrt(len(t))
    assert abs(t.mean() - (1 + 0.05 * 1.16296)) < 4 * se
    h = stragglers.simulate_steps(7, 200_000, rng, jitter=0.0, p=0.01, delta_s=0.3)
    expected = stragglers.expected_step_hiccups(7, p=0.01, delta_s=0.3)
    assert expected == pytest.approx(1 + 0.3 * (1 - 0.99**7), rel=1e-12)
    assert abs(h.mean() - expected) < 4 * h.std(ddof=1) / math.sqrt(len(h))


def test_one_slow_rank_sets_the_pace():
    """Without jitter the step is exactly the slow rank's time, whatever the number of fast ranks."""
    t = stragglers.simulate_steps(97, 10, np.random.default_rng(0), jitter=0.0, slow_ranks=1, slow_factor=1.25)
    np.testing.assert_allclose(t, 1.25, rtol=1e-15)


def _spot(**kw):
    base = dict(
        nodes=6,
        preempt_per_hour=0.2,
        replace_hours=0.5,
        elastic=False,
        min_nodes=6,
        interval_s=600.0,
        save_s=30.0,
        restart_s=120.0,
        horizon_hours=6000.0,
        rng=np.random.default_rng(11),
    )
    return elastic.simulate(**(base | kw))


def test_spot_simulator_against_renewal_closed_forms():
    """Nodes alternate up (mean 1/lambda) and down (mean D): P(up) = 1/(1 + lambda D) = 1/1.1 and
    P(all 6 up) = 1.1^-6 = 0.5645. Would catch a simulator that draws down-times with the up rate."""
    s = _spot()
    assert s["node_up"] == pytest.approx(1 / 1.1, rel=0.01)
    assert s["all_up"] == pytest.approx(1.1**-6, rel=0.03)


def test_without_preemptions_only_saves_cost_time():
    """tau = 600 s, C = 30 s: goodput 600/630 (the last partial segment is not committed: ~1e-4)."""
    s = _spot(preempt_per_hour=1e-12)
    assert s["work_hours"] / s["horizon_hours"] == pytest.approx(600 / 630, rel=1e-3)
    assert s["restarts"] == 0


def test_elastic_restarts_on_every_membership_change():
    """Same preemptions (same seed). Elastic with min 1 node restarts on the loss and on the return of
    every node: twice per preemption, but for outages still open at the horizon (all 6 down at once
    has probability 1.1^-6 * 0.1^6, never seen here); static
    restarts once each time all 6 are up again, fewer than its preemptions when outages overlap.
    Would catch elastic modelled as free of restarts."""
    static, el = _spot(), _spot(elastic=True, min_nodes=1)
    assert static["preemptions"] == el["preemptions"] > 1000
    assert 2 * el["preemptions"] - 6 <= el["restarts"] <= 2 * el["preemptions"]
    assert static["restarts"] < static["preemptions"]
    assert el["work_hours"] > static["work_hours"]


def test_predicted_step_time():
    """L = 48 ms, C = 16 ms: serial 64 ms; 1 worker 48; 2 workers 24; 3 or more 16."""
    assert [round(1e3 * dl.predicted_step_s(w), 9) for w in range(5)] == [64, 48, 24, 16, 16]


def test_real_dataloader_serialises_loading_in_the_main_process():
    """num_workers=0: each step waits the whole load (8 samples x 5 ms) and then computes (10 ms).
    Sleeps make every bound here a lower bound, exact on an idle machine; a busy machine can only add, so no
    upper bound on wall time is asserted (a loaded machine oversleeps). Would catch waits measured around the
    wrong call: including the step leaves no compute time (step - wait < 10 ms); around nothing, no load time."""
    ds = dl.SlowDataset(64, 0.005, 8)
    m = dl.measure(0, None, dataset=ds, step_s=0.010, steps=5, warmup=1)
    assert m["wait_s"] >= 0.040
    assert m["step_s"] - m["wait_s"] >= 0.010
    assert m["wait_fraction"] == pytest.approx(m["wait_s"] / m["step_s"])


def test_burst_pattern_is_one_batch_in_five():
    ds = dl.SlowDataset(8 * 1000, 0.0, 8, burst_every=5, burst_factor=6)
    slow = sum(ds.is_slow(b * 8) for b in range(1000))
    assert 150 <= slow <= 250
    assert all(ds.is_slow(b * 8) == ds.is_slow(b * 8 + 7) for b in range(100))  # whole batches are slow


def test_collective_event_names():
    assert _is_comm("gloo:all_reduce") and _is_comm("nccl:all_reduce")
    assert not _is_comm("c10d::allreduce_") and not _is_comm("aten::add")
