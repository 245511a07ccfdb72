"""Expert parallelism's all-to-all timing (distlab.model_parallel.expert_parallel_cost) against hand arithmetic,
brute-force enumeration and the model cards' published totals."""

import itertools
import math

import pytest

from distlab.model_parallel.expert_parallel_cost import (
    MoEShape,
    alltoall_over_compute,
    alltoall_seconds,
    break_even_ffn,
    dispatch_bytes,
    expected_nodes,
    expert_flops_per_token,
    moe_alltoall_seconds,
    moe_params,
    moe_shape,
)


@pytest.mark.parametrize(("k", "m", "g"), [(2, 2, 3), (3, 3, 2), (8, 4, 3), (1, 5, 4)])
def test_expected_nodes_by_enumeration(k, m, g):
    """E[distinct groups] of k experts drawn without replacement from m groups of g: every subset enumerated.
    Would catch sampling with replacement (C(MG, k) against (MG)^k)."""
    experts = range(m * g)
    subsets = list(itertools.combinations(experts, k))
    mean = sum(len({e // g for e in s}) for s in subsets) / len(subsets)
    assert expected_nodes(k, m, g) == pytest.approx(mean, rel=1e-12)


def test_published_parameter_counts():
    """Mixtral 8x7B's model card: 46.7B total, 12.9B active; DeepSeek-V3's README: 671B, 37B (typed here). Would catch
    a SwiGLU counted with two matrices, the shared expert dropped, or the dense layers counted as MoE."""
    total, active = moe_params("Mixtral-8x7B")
    assert total / 1e9 == pytest.approx(46.7, abs=0.05) and active / 1e9 == pytest.approx(12.9, abs=0.05)
    total, active = moe_params("DeepSeek-V3")
    assert total / 1e9 == pytest.approx(671, rel=0.002) and active / 1e9 == pytest.approx(37, rel=0.03)


def test_alltoall_inside_a_node_by_hand():
    """Mixtral, EP 8 in a node, T = 1000 tokens: S = 1000 x 2 x 4096 x 2 B; t = 7 x 0.6 µs + 7/8 S / 370 GB/s."""
    shape = moe_shape("Mixtral-8x7B")
    s = 1000 * 2 * 4096 * 2
    assert dispatch_bytes(shape, 1000) == s
    t = alltoall_seconds(shape, 8, 1000)
    assert t["seconds"] == pytest.approx(7 * 0.6e-6 + 7 / 8 * s / 370e9, rel=1e-12)
    assert t["network_bytes"] == 0


def test_alltoall_across_nodes_by_hand():
    """EP 16 over 2 nodes: 8/16 of S leaves through the NIC (50 GB/s), 7/16 over NVLink, in parallel; latency 15
    steps at the network's 2.7 µs. Would catch the network share counted as (e-1)/e or the two paths added."""
    shape = MoEShape(name="toy", layers=4, hidden=1024, moe_ffn=512, experts=16, top_k=3)
    s = 500 * 3 * 1024 * 2
    t = alltoall_seconds(shape, 16, 500)
    assert t["network_bytes"] == pytest.approx(s * 8 / 16)
    assert t["seconds"] == pytest.approx(15 * 2.7e-6 + max(s * 7 / 16 / 370e9, s * 8 / 16 / 50e9), rel=1e-12)
    assert moe_alltoall_seconds(shape, 16, 500) == pytest.approx(4 * 4 * t["seconds"])


def test_break_even_width_is_where_the_ratio_crosses_one():
    """At f* the bandwidth-regime ratio is 1 (tokens large enough for latency to vanish), below it above 1."""
    peak = 989e12
    f_star = break_even_ffn(64, peak_flops=peak, mfu=0.4)
    assert f_star == pytest.approx(4 * 2 * (56 / 64) * peak * 0.4 / (18 * 50e9))
    for f, above in ((f_star / 2, True), (f_star * 2, False)):
        shape = MoEShape(name="probe", layers=1, hidden=2048, moe_ffn=round(f), experts=64, top_k=4)
        ratio = alltoall_over_compute(shape, 64, 2**20, peak_flops=peak, mfu=0.4)
        assert (ratio > 1) == above
    assert break_even_ffn(8, peak_flops=peak, mfu=0.4) == 0.0  # inside a node: no network


def test_expert_flops_count_shared_experts():
    """DeepSeek-V3: (8 routed + 1 shared) x 3 matrices x 2 x 7168 x 2048, x 3 for forward + backward."""
    assert expert_flops_per_token(moe_shape("DeepSeek-V3")) == 3 * 9 * 3 * 2 * 7168 * 2048


def test_bad_layouts_are_refused():
    shape = moe_shape("Mixtral-8x7B")
    with pytest.raises(ValueError, match="do not split"):
        alltoall_seconds(shape, 3, 100)
    with pytest.raises(ValueError, match="node-limited"):
        alltoall_seconds(shape, 8, 100, gpus_per_node=4, node_limited=True)
    assert math.isclose(alltoall_seconds(shape, 1, 100)["seconds"], 0.0)
