"""GPU-NIC affinity, the rail-optimized fabric and the NCCL environment arithmetic, against hand counts."""

import pytest

from distlab.interconnect.nccl_env import ib_give_up_seconds, ib_timeout_seconds
from distlab.interconnect.nic_affinity import gdr_used, path_bytes_per_s
from distlab.interconnect.rail_fabric import bisection_per_gpu, ports, spine_share_of_rail_ring, superpods


def test_ib_timeouts_by_hand():
    """4.096 µs x 2^20 = 4.295 s per retry, x 7 retries = 30.07 s (NCCL's doc: 'about 30 s')."""
    assert ib_timeout_seconds() == pytest.approx(4.096e-6 * 2**20)
    assert ib_give_up_seconds() == pytest.approx(4.096e-6 * 2**20 * 7)
    assert ib_give_up_seconds(exponent=18, retries=3) == pytest.approx(4.096e-6 * 2**18 * 3)


def test_gdr_levels():
    """Default PXB: GDR on PIX and PXB, not beyond; at level SYS everywhere; at LOC nowhere. Would catch the order
    of topo.h's path types reversed."""
    assert gdr_used("PIX") and gdr_used("PXB") and not gdr_used("PHB") and not gdr_used("SYS")
    assert gdr_used("SYS", level="SYS") and not gdr_used("PIX", level="LOC")
    with pytest.raises(ValueError):
        gdr_used("XYZ")


def test_path_bandwidth_is_the_slowest_hop():
    """PCIe 5 x16 (63.0 GB/s) and NDR (50 GB/s): a near path is the NIC's; across Sapphire Rapids' SMP link in
    NCCL's model, 22 GB/s; on an AMD host 16 GB/s."""
    assert path_bytes_per_s("PIX") == pytest.approx(50e9)
    assert path_bytes_per_s("SYS") == pytest.approx(22e9)
    assert path_bytes_per_s("SYS", smp_entry="nccl-smp-amd") == pytest.approx(16e9)


def test_superpod_ports_and_bisection():
    """Every SuperPOD row: 32 + 32 ports per leaf, bisection = the NIC's 50 GB/s; an invented row with half the
    uplinks is oversubscribed 2:1 and gives 25 GB/s. Would catch a bisection that ignores the uplinks."""
    for row in superpods():
        p = ports(row)
        assert p["leaf_down"] == p["leaf_up"] == 32
        assert bisection_per_gpu(row) == pytest.approx(50e9)
    half = dict(superpods()[0], leaf_spine_cables=superpods()[0]["leaf_spine_cables"] // 2)
    assert bisection_per_gpu(half) == pytest.approx(25e9)


@pytest.mark.parametrize(("nodes", "per_leaf"), [(32, 4), (10, 3), (7, 7), (9, 2)])
def test_spine_share_of_a_rail_ring(nodes, per_leaf):
    """A ring over nodes 0..N-1 in order, per_leaf whole nodes per leaf: the hops whose ends sit on different leaves,
    counted here by brute force (awkward sizes: a last leaf only partly filled). Rails: none."""
    leaf = [k // per_leaf for k in range(nodes)]
    crossing = sum(leaf[k] != leaf[(k + 1) % nodes] for k in range(nodes))
    assert spine_share_of_rail_ring(nodes, per_leaf, rail_optimized=False) == pytest.approx(crossing / nodes)
    assert spine_share_of_rail_ring(nodes, per_leaf, rail_optimized=True) == 0.0
