"""The alpha-beta model against independent references: a ring all-reduce that really moves data
(counting its steps and bytes), nccl-tests' published bus-bandwidth factors, and hand arithmetic."""

import math

import numpy as np
import pytest

from distlab.hardware import collectives as c
from distlab.hardware import links


def ring_allreduce(inputs: list[np.ndarray]) -> tuple[list[np.ndarray], int, list[int]]:
    """A ring all-reduce written from the textbook (reduce-scatter, then all-gather), one send per rank
    per step. Returns (outputs, steps, elements sent by each rank)."""
    p, n = len(inputs), len(inputs[0])
    bounds = np.linspace(0, n, p + 1).round().astype(int)
    chunks = [[x[bounds[i] : bounds[i + 1]].astype(np.float64).copy() for i in range(p)] for x in inputs]
    sent, steps = [0] * p, 0
    for s in range(p - 1):  # reduce-scatter: rank r sends chunk (r - s) to rank r + 1, which adds it
        msgs = [(r, (r - s) % p, chunks[r][(r - s) % p].copy()) for r in range(p)]
        for r, i, data in msgs:
            chunks[(r + 1) % p][i] += data
            sent[r] += len(data)
        steps += 1
    for s in range(p - 1):  # all-gather: rank r forwards its finished chunk (r + 1 - s)
        msgs = [(r, (r + 1 - s) % p, chunks[r][(r + 1 - s) % p].copy()) for r in range(p)]
        for r, i, data in msgs:
            chunks[(r + 1) % p][i] = data
            sent[r] += len(data)
        steps += 1
    return [np.concatenate(ch) for ch in chunks], steps, sent


@pytest.mark.parametrize("p,n", [(2, 1000), (3, 999), (5, 1000), (7, 97)])
def test_ring_allreduce_steps_and_bytes_match_the_model(p, n):
    """Would catch a wrong latency step count (p - 1 instead of 2(p - 1)) or a bandwidth factor that
    forgets the all-gather half. Data is summed for real, so the simulated ring is a true all-reduce."""
    rng = np.random.default_rng(p)
    inputs = [rng.standard_normal(n) for _ in range(p)]
    outputs, steps, sent = ring_allreduce(inputs)
    expected = np.sum(inputs, axis=0)
    for out in outputs:
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    model_steps, factor = c.steps_and_factor("all-reduce", p)
    assert steps == model_steps
    # Uneven chunks (n not divisible by p) make the busiest rank send at most 2(p-1) elements more.
    assert factor * n - 1e-9 <= max(sent) <= factor * n + 2 * (p - 1)
    assert sum(sent) == pytest.approx(2 * (p - 1) * n)  # every chunk crosses p - 1 links, twice


@pytest.mark.parametrize("n", [2, 3, 8, 1000])
def test_bus_bandwidth_factors_are_nccl_tests(n):
    """nccl-tests doc/PERFORMANCE.md, Summary: all-reduce 2(n-1)/n, reduce-scatter, all-gather and
    all-to-all (n-1)/n, broadcast 1. Would catch a factor that does not match what nccl-tests prints."""
    published = {
        "all-reduce": 2 * (n - 1) / n,
        "reduce-scatter": (n - 1) / n,
        "all-gather": (n - 1) / n,
        "all-to-all": (n - 1) / n,
        "broadcast": 1.0,
    }
    for op, factor in published.items():
        assert c.bus_bandwidth_factor(op, n) == pytest.approx(factor, rel=1e-15)


def test_one_gigabyte_allreduce_on_eight_h100_by_hand():
    """1 GB over 8 GPUs on NVLink 4: 14 steps of 0.6 us + 1.75 * 1e9 / 450e9 s. Would catch the 900 GB/s
    bidirectional figure used as a per-direction bandwidth (which halves the prediction)."""
    lk = links.link("NVLink4-H100")
    assert lk.bandwidth_bytes_per_s == 450e9
    t = c.link_time_seconds("all-reduce", 1e9, 8, lk)
    assert t == pytest.approx(14 * 0.6e-6 + 1.75 / 450, rel=1e-12)


def test_link_units():
    """Would catch bits read as bytes, or PCIe's 128b/130b encoding forgotten."""
    assert links.link("InfiniBand-NDR").bandwidth_bytes_per_s == 50e9
    assert links.link("InfiniBand-HDR").bandwidth_bytes_per_s == 25e9
    assert links.link("Ethernet-800G").bandwidth_bytes_per_s == 100e9
    pcie5 = links.link("PCIe5-x16").bandwidth_bytes_per_s
    assert pcie5 == pytest.approx(32e9 * 16 * 128 / 130 / 8, rel=1e-12)
    # NVIDIA's datasheet rounds it to 128 GB/s bidirectional: within 2 % of the encoded rate.
    assert abs(2 * pcie5 - 128e9) / 128e9 < 0.02
    assert links.link("PCIe4-x16").bandwidth_bytes_per_s == pytest.approx(pcie5 / 2)
    assert links.link("InfiniBand-NDR").alpha_s == pytest.approx(2.7e-6)
    assert links.link("NVLink4-H100", "simple").alpha_s == pytest.approx(3.4e-6)
    assert set(links.links()) >= {
        "NVLink3-A100",
        "NVLink4-H100",
        "NVLink5-B200",
        "PCIe4-x16",
        "InfiniBand-XDR",
        "RoCE-400GbE",
        "Ethernet-100G",
        "NVSwitch-HGX-H100",
        "xGMI-MI300X",
    }
    # AMD prints Infinity Fabric per link (7 links of 128 GB/s, both directions added): 448 GB/s each way.
    assert links.link("xGMI-MI300X").bandwidth_bytes_per_s == pytest.approx(7 * 128e9 / 2, rel=1e-12)


def test_other_collectives_by_hand():
    """all-gather of 96 MB total on 3 ranks: 2 steps + (2/3) S / B; broadcast sends S once; all-to-all
    keeps 1/p of its bytes local. Would catch S taken per rank instead of nccl-tests' total."""
    kw = dict(alpha_s=1e-5, bandwidth_bytes_per_s=1e10)
    assert c.time_seconds("all-gather", 96e6, 3, **kw) == pytest.approx(2e-5 + 96e6 * 2 / 3 / 1e10)
    assert c.time_seconds("reduce-scatter", 96e6, 3, **kw) == pytest.approx(2e-5 + 96e6 * 2 / 3 / 1e10)
    assert c.time_seconds("all-to-all", 96e6, 4, **kw) == pytest.approx(3e-5 + 96e6 * 3 / 4 / 1e10)
    assert c.time_seconds("broadcast", 96e6, 5, **kw) == pytest.approx(4e-5 + 96e6 / 1e10)
    assert c.time_seconds("all-reduce", 96e6, 5, algorithm="naive", **kw) == pytest.approx(8e-5 + 8 * 96e6 / 1e10)
    # Tree: 2 ceil(log2 p) steps; p = 5 -> 6 steps.
    assert c.time_seconds("all-reduce", 96e6, 5, algorithm="tree", **kw) == pytest.approx(6e-5 + 2 * 96e6 / 1e10)
    assert c.time_seconds("all-reduce", 96e6, 1, **kw) == 0.0


def test_tree_beats_ring_only_below_the_crossover():
    """Would catch a crossover formula with the sign of the bandwidth difference flipped."""
    kw = dict(alpha_s=2.7e-6, bandwidth_bytes_per_s=50e9)
    x = c.crossover_bytes(64, **kw)
    # Closed form: (2*63 - 2*6) alpha B / (2 - 2*63/64).
    assert x == pytest.approx((126 - 12) * 2.7e-6 * 50e9 / (2 - 126 / 64), rel=1e-12)
    ring = lambda s: c.time_seconds("all-reduce", s, 64, **kw)
    tree = lambda s: c.time_seconds("all-reduce", s, 64, algorithm="tree", **kw)
    assert tree(x / 2) < ring(x / 2) and tree(2 * x) > ring(2 * x)
    assert ring(x) == pytest.approx(tree(x), rel=1e-12)
    assert c.crossover_bytes(2, **kw) == 0.0  # with 2 ranks both take 2 steps: the tree never wins


def test_hierarchical_reduces_to_flat_ring_at_the_edges():
    """One node: reduce-scatter + all-gather on NVLink is exactly the ring all-reduce. One GPU per node:
    only the inter-node all-reduce remains. Would catch the inter phase sized S instead of S/g."""
    s = 123_456_789
    one_node = c.hierarchical_allreduce_seconds(s, 8, 1)
    assert one_node == pytest.approx(c.link_time_seconds("all-reduce", s, 8, "NVLink4-H100"), rel=1e-12)
    one_gpu = c.hierarchical_allreduce_seconds(s, 1, 16)
    assert one_gpu == pytest.approx(c.link_time_seconds("all-reduce", s, 16, "InfiniBand-NDR"), rel=1e-12)
    phases = c.hierarchical_allreduce_phases(s, 8, 4)
    nd = links.link("InfiniBand-NDR")
    assert phases["all-reduce (inter)"] == pytest.approx(6 * nd.alpha_s + 1.5 * (s / 8) / 50e9, rel=1e-12)


def test_bad_input_is_a_value_error():
    kw = dict(alpha_s=1e-6, bandwidth_bytes_per_s=1e9)
    for bad in [
        ("all-sum", 1, 2, {}),
        ("all-gather", 1, 2, {"algorithm": "tree"}),
        ("all-reduce", -1, 2, {}),
        ("all-reduce", 1, 0, {}),
        ("all-reduce", 1, 2.5, {}),
    ]:
        op, s, p, extra = bad
        with pytest.raises(ValueError):
            c.time_seconds(op, s, p, **kw, **extra)
    with pytest.raises(ValueError, match="bandwidth"):
        c.time_seconds("all-reduce", 1, 2, alpha_s=0, bandwidth_bytes_per_s=0)
    with pytest.raises(ValueError, match="unknown link"):
        links.link("DGX-H100")
    with pytest.raises(ValueError, match="nodes"):
        c.hierarchical_allreduce_seconds(1e6, 8, 0)
    assert math.isfinite(c.hierarchical_allreduce_seconds(0, 8, 2))


def test_flat_ring_is_limited_by_what_a_node_can_push_out():
    """A ring over 2 nodes with 4 of its GPUs per node: min(450, 4 x 50) = 200 GB/s per rank, network alpha.
    Would catch a flat ring credited with NVLink bandwidth because most of its hops are NVLink."""
    from distlab.interconnect.topology import flat_ring_link

    lk = flat_ring_link(4, nodes=2)
    assert lk.bandwidth_bytes_per_s == 200e9 and lk.alpha_s == pytest.approx(2.7e-6)
    assert flat_ring_link(8, nodes=4).bandwidth_bytes_per_s == 400e9
    assert flat_ring_link(8, nodes=1).bandwidth_bytes_per_s == 450e9
    # one ring per NIC: 8 NICs per node give 8 x 50 GB/s; a node with one NIC for its 8 GPUs, one port
    assert flat_ring_link(8, nodes=8, nics_per_node=8).bandwidth_bytes_per_s == 400e9
    assert flat_ring_link(8, nodes=8, nics_per_node=1).bandwidth_bytes_per_s == 50e9
    assert flat_ring_link(4, nodes=2, nics_per_node=2).bandwidth_bytes_per_s == 100e9
    with pytest.raises(ValueError, match="nics_per_node"):
        flat_ring_link(8, nodes=2, nics_per_node=0)


def test_tp_worked_example_by_hand():
    """Llama 2 70B, TP=8 in one node: 4 x 80 all-reduces of 4096 x 8192 x 2 bytes, each 14 x 0.6 us +
    1.75 x 67,108,864 / 450e9 s. Would catch a TP count of 2 per layer (forward only) or fp32 activations."""
    from distlab.interconnect.topology import tp_step_seconds

    t = tp_step_seconds("70B", 8, 8)
    assert t["message_bytes"] == 67_108_864 and t["allreduces"] == 320
    per = 14 * 0.6e-6 + 1.75 * 67_108_864 / 450e9
    assert t["comm_s"] == pytest.approx(320 * per, rel=1e-12)
    with pytest.raises(ValueError, match="multiple"):
        tp_step_seconds("70B", 8, 3)


# ---------------------------------------------------------------- NCCL's protocol model, as the planner uses it
def test_protocol_latency_by_hand_from_tuning_cc():
    """NCCL 2.30's ring latency, typed from tuning.cc's tables: an 8-rank all-reduce in one node takes 14 steps;
    LL: base 6.6 + 14 x 0.6 us; Simple: 8.4 + 14 x 3.4. Across 2 nodes of 8 (16 ranks, 2 of its 30 steps
    cross the network): LL 6.6 + 28 x max(0.6, 1.0) + 2 x 2.7 us; Simple 8.4 + 28 x max(3.4, 3 x 1.0) + 2 x 2 x 14.
    Would catch the network's steps counted for every step, or Simple's extra flush dropped."""
    assert c.protocol_latency_s("all-reduce", 8, 1, "ll") == pytest.approx((6.6 + 14 * 0.6) * 1e-6, rel=1e-12)
    assert c.protocol_latency_s("all-reduce", 8, 1, "simple") == pytest.approx((8.4 + 14 * 3.4) * 1e-6, rel=1e-12)
    assert c.protocol_latency_s("all-reduce", 16, 2, "ll") == pytest.approx((6.6 + 28 * 1.0 + 2 * 2.7) * 1e-6)
    assert c.protocol_latency_s("all-reduce", 16, 2, "simple") == pytest.approx(
        (8.4 + 28 * 3.4 + 2 * 2 * 14.0) * 1e-6, rel=1e-12
    )
    assert c.protocol_latency_s("all-gather", 8, 1, "ll") == pytest.approx((6.6 + 7 * 0.6) * 1e-6, rel=1e-12)


def test_nccl_seconds_takes_the_fastest_protocol():
    """A tiny message goes LL (latency), a huge one Simple (bandwidth); LL128 runs at 0.92 of Simple's
    bandwidth, LL at half of it capped by llMaxBw. Would catch a single-protocol model."""
    bus = 450e9
    small = c.nccl_seconds("all-reduce", 1024, 8, bus_bytes_per_s=bus)
    assert small == pytest.approx(
        c.protocol_latency_s("all-reduce", 8, 1, "ll") + 1.75 * 1024 / min(0.5 * bus, c.protocol_bandwidths(bus)["ll"]),
        rel=1e-12,
    )
    big = c.nccl_seconds("all-reduce", 2**34, 8, bus_bytes_per_s=bus)
    assert big == pytest.approx(c.protocol_latency_s("all-reduce", 8, 1, "simple") + 1.75 * 2**34 / bus, rel=1e-12)
    assert c.protocol_bandwidths(bus)["ll128"] == pytest.approx(0.92 * bus)


def test_the_fitted_model_reproduces_the_nccl_tests_curves():
    """The issue's bar: the model reproduces published nccl-tests bus bandwidth within 15 %. On NVIDIA's 8 x H100
    DGX curve (fitted from 16 MiB) every size from 128 KiB to 16 GiB is within 15 % in time; at 1 MiB the
    measured 67.04 GB/s (typed from the curve) is matched within 15 %. The H200 curve (same NVLink 4, not fitted,
    measured through torch.distributed) is within 15 % from 64 MiB. The old constant model (370 GB/s at every
    size) gives about 137 GB/s at 1 MiB: twice the measurement. Would catch a fit that only matches the top."""
    nv4 = c.fitted_bus_bandwidth("NVLink4-H100")
    h100 = c.curve_errors("dgxc-h100-8gpu-all-reduce", nv4)
    assert len(h100) == 32 and max(abs(e) for s, e in h100 if s >= 128 * 2**10) <= 0.15
    at_1mib = c.nccl_bus_bandwidth("all-reduce", 2**20, 8, bus_bytes_per_s=nv4)
    assert at_1mib == pytest.approx(67.04e9, rel=0.15)
    h200 = c.curve_errors("mleng-h200-8gpu-all-reduce-torch", nv4)
    assert max(abs(e) for s, e in h200 if s >= 64 * 2**20) <= 0.15
    assert 400e9 < nv4 < 500e9  # between the busbw at 256 MiB and the largest printed
