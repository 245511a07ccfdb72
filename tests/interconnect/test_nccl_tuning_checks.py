"""ncclTopoTuneModel transcribed from tuning.cc (2.20.3), against cells worked by hand from the C tables."""

from __future__ import annotations

import pytest

from distlab.interconnect.nccl_tuning_checks import hand_overs, tune_model


def test_one_node_ring_ll_all_reduce_is_base_plus_14_nvlink_steps():
    """8 GPUs: baseLat Ring/LL 6.6 us + 2(8-1) x hwLat NVLink Ring/LL 0.6 us = 15.0 us; busBw 370 GB/s x 1/4 = 92.5,
    over Hopper's one-node LL cap of 87.7 GB/s; algbw x 8/14. Would catch the steps counted as n - 1, or the cap
    dropped."""
    cell = tune_model(8, 1)[("all-reduce", "ring", "ll")]
    assert cell["latency_us"] == pytest.approx(6.6 + 14 * 0.6, rel=1e-12)
    assert cell["bus"] == pytest.approx(87.7e9, rel=1e-12)
    assert cell["algbw"] == pytest.approx(87.7e9 * 8 / 14, rel=1e-12)


def test_eight_nodes_tree_ll_and_the_cpu_vendors_ll_cap():
    """64 GPUs on 8 nodes: tree LL latency 6.8 + 2 (7 x 0.6 + log2 8 x 5.0) = 45.2 us; the LL ring's busBw is capped
    by llMaxBws' CPU row at more than 2 nodes: 20.4 GB/s on Intel hosts (row 0), 19.0 on AMD (row 1). Would catch
    the AMD row used for Intel hosts (the model's former simplification)."""
    intel, amd = tune_model(64, 8, "intel"), tune_model(64, 8, "amd")
    assert intel[("all-reduce", "tree", "ll")]["latency_us"] == pytest.approx(6.8 + 2 * (7 * 0.6 + 3 * 5.0))
    assert intel[("all-reduce", "ring", "ll")]["bus"] == pytest.approx(20.4e9)
    assert amd[("all-reduce", "ring", "ll")]["bus"] == pytest.approx(19.0e9)


def test_one_node_all_reduce_hands_over_once_from_ll_ring_to_nvls():
    """8 GPUs: the LL ring (15 us, 87.7 x 8/14 GB/s) hands over to NVLS (23 us, 370 x 5/6 GB/s) once, where
    15 us + S / W_ll = 23 us + S / W_nvls."""
    w_ll, w_nvls = 87.7e9 * 8 / 14, 370e9 * 5 / 6
    expected = 8e-6 / (1 / w_ll - 1 / w_nvls)
    assert hand_overs(tune_model(8, 1), "all-reduce") == [pytest.approx(expected, rel=1e-9)]


def test_one_node_ring_by_hand_at_both_ends():
    """tuning.cc 2.30.7's ring on 8 NVLink ranks, worked with its printed constants: a 1 GiB all-reduce is Simple's
    8.4 + 14 x 3.4 µs plus 2(n-1)/n x S at the bus bandwidth; 8 bytes is LL's 6.6 + 14 x 0.6 µs plus the bytes at
    half the bus, capped at Hopper's one-node 141 GB/s (llMaxBws)."""
    from distlab.interconnect.nccl_tuning_checks import ring_seconds_by_hand

    bus = 360e9
    big = ring_seconds_by_hand("all-reduce", 2**30, 8, bus, "hopper")
    assert big == pytest.approx((8.4 + 14 * 3.4) * 1e-6 + 2 * 7 / 8 * 2**30 / bus, rel=1e-12)
    small = ring_seconds_by_hand("all-reduce", 8, 8, bus, "hopper")
    assert small == pytest.approx((6.6 + 14 * 0.6) * 1e-6 + 2 * 7 / 8 * 8 / 141e9, rel=1e-12)
    gather = ring_seconds_by_hand("all-gather", 2**30, 8, bus, "hopper")  # 7 steps, (n-1)/n of the bytes
    assert gather == pytest.approx((8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * 2**30 / bus, rel=1e-12)


def test_one_rank_per_node_takes_the_trees_network_latency():
    """8 ranks on 8 nodes: every one of the 14 ring steps crosses the network, and with ppn = 1 tuning.cc prices it at
    the tree's network hwLat (LL 5.0 µs, not the ring's 2.7), over Intel's 1.0 µs post overhead: at 8 bytes LL wins
    with 6.6 + 14 x 5.0 µs, its bandwidth half the bus (25 GB/s) capped at Intel hosts' 20.4 GB/s beyond 2 nodes.
    The planner's model agrees."""
    from distlab.hardware.collectives import nccl_seconds
    from distlab.interconnect.nccl_tuning_checks import ring_seconds_by_hand

    t = ring_seconds_by_hand("all-reduce", 8, 8, 50e9, "hopper", 8)
    assert t == pytest.approx((6.6 + 14 * 5.0) * 1e-6 + 2 * 7 / 8 * 8 / 20.4e9, rel=1e-12)
    assert nccl_seconds("all-reduce", 8, 8, bus_bytes_per_s=50e9, nodes=8) == pytest.approx(t, rel=1e-12)


def test_the_planners_ll_cap_takes_the_row_tuning_cc_takes():
    """llMaxBws[index1][index2] (tuning.cc 2.30.7, lines 263-272): on one node the chip's row (Hopper 141, Blackwell
    2 x 141 GB/s), on several the hosts' CPU row: Intel (row 0) 39.0 on 2 nodes and 20.4 beyond. The planner took
    Hopper's row on several nodes (45, 35) and Hopper's for a GB200 (141): both caught here. Ampere keeps 2.20's
    table (DGX A100's AMD hosts on several nodes: row 1)."""
    from distlab.hardware.collectives import _ll_cap_bytes_per_s

    got = {(a, n): _ll_cap_bytes_per_s(a, n) / 1e9 for a in ("hopper", "blackwell", "ampere") for n in (1, 2, 8)}
    assert got == pytest.approx(
        {
            ("hopper", 1): 141.0,
            ("hopper", 2): 39.0,
            ("hopper", 8): 20.4,
            ("blackwell", 1): 282.0,
            ("blackwell", 2): 39.0,
            ("blackwell", 8): 20.4,
            ("ampere", 1): 87.7,
            ("ampere", 2): 22.5,
            ("ampere", 8): 19.0,
        }
    )


def test_gb200_groups_and_rings_by_hand_catch_a_gb200_priced_as_hopper(monkeypatch):
    """nvl72-plan's claim (comms_checks.nvl72_comms_by_hand) holds, and fails when the planner prices a GB200 rack's
    NCCL with Hopper's tables (a 1 MiB all-reduce inside a domain is LL-capped at 141 instead of 282 GB/s)."""
    from distlab.core.results import Result
    from distlab.planner import comms
    from distlab.planner.comms_checks import nvl72_comms_by_hand
    from distlab.planner.parallel_rules import nvl72

    def racks(trays):
        return nvl72(racks=4, trays=trays)

    r = Result("nvl72", "cpu")
    nvl72_comms_by_hand(r, racks)
    assert r.claims[0].passed and r.claims[0].measured < 1e-12
    monkeypatch.setattr(comms, "arch", lambda c: "hopper")
    r = Result("nvl72", "cpu")
    nvl72_comms_by_hand(r, racks)
    assert not r.claims[0].passed and r.claims[0].measured > 0.01
