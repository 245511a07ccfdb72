"""NCCL's tuning model (distlab.interconnect.nccl_model) against numbers worked by hand from tuning.cc at b6475625:
baseLat, hwLat and the refinement factors typed here from the source, not read from distlab/data."""

import math

import pytest

from distlab.interconnect import nccl_model as m

EFFECTIVE = 370e9  # the maintainer's effective NVLink 4 rate (nccl-tests issue 212), bytes/s


def test_latencies_by_hand_one_node():
    """8 GPUs, NVLink: ring LL all-reduce = 6.6 + 2(8-1) x 0.6 µs; ring Simple = 8.4 + 14 x 3.4; tree LL =
    6.8 + 2 x (7 x 0.6); NVLS = 23 (assigned, no base); all-gather ring LL = 6.6 + 7 x 0.6. Would catch nsteps of
    n instead of 2(n-1), a base added to NVLS, or the tree's factor 2 dropped."""
    t = m.nvlink_node(8)
    assert m.latency_us("all-reduce", "ring", "ll", t) == pytest.approx(6.6 + 14 * 0.6)
    assert m.latency_us("all-reduce", "ring", "simple", t) == pytest.approx(8.4 + 14 * 3.4)
    assert m.latency_us("all-reduce", "tree", "ll", t) == pytest.approx(6.8 + 2 * 7 * 0.6)
    assert m.latency_us("all-reduce", "nvls", "simple", t) == pytest.approx(23.0)
    assert m.latency_us("all-gather", "ring", "ll", t) == pytest.approx(6.6 + 7 * 0.6)


def test_latencies_by_hand_across_nodes():
    """64 GPUs on 8 nodes (Intel host: net overhead 1 µs, x3 for Simple): ring Simple all-reduce =
    8.4 + (126 - 16) x max(3.4, 3) + 16 x 14; tree LL = 6.8 + 2 x (7 x 0.6 + 3 x 5.0); ring LL =
    6.6 + 110 x max(0.6, 1) + 16 x 2.7. Would catch the inter-node steps counted as 2(N-1) or the overhead ignored."""
    t = m.ib_cluster(8)
    assert m.latency_us("all-reduce", "ring", "simple", t) == pytest.approx(8.4 + 110 * 3.4 + 16 * 14)
    assert m.latency_us("all-reduce", "tree", "ll", t) == pytest.approx(6.8 + 2 * (7 * 0.6 + 3 * 5.0))
    assert m.latency_us("all-reduce", "ring", "ll", t) == pytest.approx(6.6 + 110 * 1.0 + 16 * 2.7)


def test_bandwidths_by_hand():
    """algbw: ring Simple = busBw x n / 2(n-1); NVLS = busBw x 5/6; tree LL = min(B x 0.92 / 3.8, 87.7 GB/s) / 2;
    ring LL all-reduce = min(87.7, B/4) x n/2(n-1). Would catch the busBw->algbw ratio applied twice or not at all."""
    t = m.nvlink_node(8)
    assert m.algorithm_bandwidth("all-reduce", "ring", "simple", t) == pytest.approx(EFFECTIVE * 8 / 14)
    assert m.algorithm_bandwidth("all-reduce", "nvls", "simple", t) == pytest.approx(EFFECTIVE * 5 / 6)
    assert m.algorithm_bandwidth("all-reduce", "tree", "ll", t) == pytest.approx(
        min(EFFECTIVE * 0.92 / 3.8, 87.7e9) / 2
    )
    assert m.algorithm_bandwidth("all-reduce", "ring", "ll", t) == pytest.approx(min(87.7e9, EFFECTIVE / 4) * 8 / 14)
    assert m.algorithm_bandwidth("all-gather", "ring", "ll", t) == pytest.approx(min(87.7e9, EFFECTIVE / 3) * 8 / 7)


def test_what_nccl_2_20_offers():
    """NVLS only with Simple, on one node of 3 or more GPUs; tree only for all-reduce. Would catch NVLS offered on
    several nodes (2.20.3 skips it there) or trees for all-gather."""
    one, two, many = m.nvlink_node(8), m.nvlink_node(2), m.ib_cluster(2)
    assert m.available("all-reduce", "nvls", "simple", one)
    assert not m.available("all-reduce", "nvls", "ll", one)
    assert not m.available("all-reduce", "nvls", "simple", two)
    assert not m.available("all-reduce", "nvls", "simple", many)
    assert not m.available("all-gather", "tree", "ll", one)
    assert ("nvls", "simple") not in m.choices("all-reduce", many)


@pytest.mark.parametrize("topo", [m.nvlink_node(8), m.nvlink_node(3), m.ib_cluster(3), m.ib_cluster(16)])
def test_winners_are_the_minimum_at_every_size(topo):
    """On awkward rank counts the analytic envelope's winner is the brute-force minimum at 300 sizes, and the
    times of the two choices are equal at each hand-over. Would catch a crossover formula with a sign error."""
    env = m.winners("all-reduce", topo)
    for exp in [x / 20 for x in range(0, 700)]:
        size = 10**exp
        if size >= 2.0**36:
            break
        seg = next(w for w in env if w["from_bytes"] <= size <= w["to_bytes"])
        assert (seg["algorithm"], seg["protocol"]) == m.best("all-reduce", size, topo)[:2]
    for a, b in zip(env, env[1:]):
        s = b["from_bytes"]
        ta = m.time_seconds("all-reduce", a["algorithm"], a["protocol"], s, topo)
        tb = m.time_seconds("all-reduce", b["algorithm"], b["protocol"], s, topo)
        assert ta == pytest.approx(tb, rel=1e-9)


def test_crossover_of_lines_that_never_cross_is_inf():
    t = m.nvlink_node(8)
    # Simple ring has both more latency and less bandwidth than NVLS: it never overtakes it
    assert m.crossover_bytes("all-reduce", ("nvls", "simple"), ("ring", "simple"), t) == math.inf


def test_bad_inputs():
    with pytest.raises(ValueError, match="split evenly"):
        m.Topology(ranks=9, nodes=2, graph_bytes_per_s=1e9)
    with pytest.raises(ValueError, match="positive"):
        m.Topology(ranks=8, nodes=1, graph_bytes_per_s=0)
    with pytest.raises(ValueError, match="offers no"):
        m.time_seconds("all-gather", "tree", "ll", 1e6, m.nvlink_node(8))
    with pytest.raises(ValueError, match="unknown collective"):
        m.available("all-to-all", "ring", "ll", m.nvlink_node(8))
