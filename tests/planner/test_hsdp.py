"""Hybrid sharding (HSDP: --dp-shard N --dp-replicate M) and NVLink domains larger than a node, against references
built here: chapter 6's ZeRO-3 bytes over the shard group, NCCL's all-reduce of the gradient shard across replicas
priced with distlab.hardware.collectives directly, and the placement of each group (which link it runs on)."""

import math

import pytest

from distlab.hardware.collectives import nccl_seconds
from distlab.models.shapes import preset
from distlab.planner import comms
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.cost import data_parallel_exposed, memory_per_gpu, stage_time, step
from distlab.planner.search import search
from distlab.sharding.zero import model_state_bytes_per_gpu

M7 = preset("7B")


def test_hsdp_model_state_is_zero3_over_the_shard_group():
    """ZeRO-3 inside a replica of 8 ranks holds 1/8 of the model state, whatever the replica count (4 here, DP 32).
    Would catch HSDP sharding over all of DP (1/32) or not at all."""
    c = cluster("H100-SXM", nodes=4)
    t = Training(global_batch_tokens=128 * 4096, seq=4096)
    p = Plan(dp=32, zero=3, microbatches=4, dp_replicate=4)
    expected = model_state_bytes_per_gpu(M7.params(), 8, 3)["total_bytes"]
    assert p.dp_shard == 8 and p.shard_group == 8
    assert memory_per_gpu(m=M7, c=c, t=t, p=p).model_states == pytest.approx(expected, rel=1e-12)
    flat = memory_per_gpu(M7, c, t, Plan(dp=32, zero=3, microbatches=4)).model_states
    assert flat == pytest.approx(model_state_bytes_per_gpu(M7.params(), 32, 3)["total_bytes"], rel=1e-12)


def test_hsdp_traffic_is_the_shard_groups_plus_the_replica_all_reduce():
    """HSDP's data-parallel traffic = FSDP's inside the 8-GPU node (the shard group) + per layer and micro-batch an
    all-reduce of that layer's gradient shard (bf16, 1/8 of the layer) over the 4 replicas, one per node, on each
    GPU's own NIC. The reference prices that all-reduce with NCCL's model called directly at 4 ranks on 4 nodes and
    the NIC's bandwidth. Would catch the replicas' all-reduce priced on NVLink, on the whole gradient, or left out."""
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    one, four = cluster("H100-SXM", nodes=1), cluster("H100-SXM", nodes=4)
    t4 = Training(global_batch_tokens=4 * 64 * 4096, seq=4096)
    fsdp = Plan(dp=8, zero=3, microbatches=8)
    hsdp = Plan(dp=32, zero=3, microbatches=8, dp_replicate=4)
    st = stage_time(M7, one, t, fsdp, M7.layers, first=True, last=True)
    _, total_fsdp = data_parallel_exposed(M7, one, t, fsdp, st, M7.layers)
    _, total_hsdp = data_parallel_exposed(M7, four, t4, hsdp, st, M7.layers)
    per_layer = M7.params_per_layer()
    rest = M7.params() - M7.layers * per_layer
    nic = four.inter.bandwidth_bytes_per_s  # one NIC per GPU: each replica ring leaves its node on one NIC

    def ar(elements: int) -> float:
        return nccl_seconds("all-reduce", elements * 2 / 8, 4, bus_bytes_per_s=nic, nodes=4, intra="nvlink")

    expected = total_fsdp + 8 * (M7.layers * ar(per_layer) + ar(rest))
    assert total_hsdp == pytest.approx(expected, rel=1e-9)


def test_without_replicas_nothing_changes():
    """dp_replicate = 1 is plain ZeRO over dp x cp, bit for bit. Would catch HSDP's terms leaking into every plan."""
    c = cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    for zero in (1, 2, 3):
        a = step(M7, c, t, Plan(dp=16, zero=zero, microbatches=4))
        b = step(M7, c, t, Plan(dp=16, zero=zero, microbatches=4, dp_replicate=1))
        assert a.seconds == b.seconds


def test_search_finds_hsdp_where_the_network_is_thin():
    """With one 50 GB/s NIC per 8-GPU node, FSDP's per-layer gathers across 4 nodes crawl; HSDP keeps them on
    NVLink and sends only the gradient shards across. The search, not told, must pick a replicated layout among
    ZeRO-3 plans. Would catch HSDP missing from the search."""
    c = cluster("H100-SXM", nodes=4, nics_per_node=1)
    t = Training(global_batch_tokens=128 * 4096, seq=4096)
    best = search(M7, c, t, fixed={"tp": 1, "pp": 1, "zero": 3}, min_headroom=0)[0]
    assert best.plan.dp_replicate == 4 and best.plan.dp_shard == 8
    assert best.to_dict()["dp_replicate"] == 4 and best.to_dict()["dp_shard"] == 8


def test_plan_refuses_replicas_that_do_not_divide_dp():
    """Would catch a shard group of a fractional number of ranks (DP 12 in 5 replicas)."""
    with pytest.raises(ValueError, match="does not divide DP"):
        Plan(dp=12, zero=3, dp_replicate=5)
    with pytest.raises(ValueError, match="ZeRO"):
        Plan(dp=8, zero=0, dp_replicate=2)


def test_nvlink_domain_spans_hosts():
    """GB200 NVL72-style: 4-GPU trays in a 72-GPU domain. A 24-rank group (it tiles the rack) runs on NVLink even
    though it spans 6 hosts; on 4-GPU hosts without the domain it goes over the NICs. Would catch the planner
    taking the host to be the NVLink domain."""
    rack = cluster("B200", gpus_per_node=4, nodes=36, nvlink_domain=72)
    hosts = cluster("B200", gpus_per_node=4, nodes=36)
    assert rack.domain == 72 and hosts.domain == 4
    assert comms.group(rack, 24, 1).transport == "nvlink" and comms.group(rack, 24, 1).nodes == 1
    g = comms.group(hosts, 24, 1)
    assert g.transport == "net" and g.nodes == 6
    # across racks: a group of 4 with 72 GPUs inside each rank's inner dims spans 4 domains, one rank per domain
    wide = comms.group(rack, 4, 72)
    assert wide.nodes == 4 and wide.bus_bytes_per_s == pytest.approx(rack.nic_bytes_per_s_per_gpu)


@pytest.mark.parametrize("domain, nodes", [(12, 4), (72, 9), (0, 3)])
def test_bad_nvlink_domains_are_refused(domain, nodes):
    """A domain must be a whole number of hosts and divide the GPUs (12 over 4-GPU hosts is fine, 9 hosts = 36 GPUs
    are not 72-GPU racks); 0 means the host. Would catch a silently truncated last domain."""
    if domain in (0, 12):
        assert cluster("B200", gpus_per_node=4, nodes=3 if domain == 12 else nodes, nvlink_domain=domain or None)
        return
    with pytest.raises(ValueError, match="does not divide"):
        cluster("B200", gpus_per_node=4, nodes=nodes, nvlink_domain=domain)
    with pytest.raises(ValueError, match="whole number"):
        cluster("B200", gpus_per_node=4, nodes=18, nvlink_domain=6)


def test_oversubscription_divides_the_bandwidth_between_domains():
    """A 2:1 tapered fabric halves what a GPU's traffic between domains gets and leaves NVLink alone. Would catch
    the factor applied inside the node or not at all."""
    full, half = cluster("H100-SXM", nodes=4), cluster("H100-SXM", nodes=4, oversubscription=2)
    assert half.nic_bytes_per_s_per_gpu * 2 == pytest.approx(full.nic_bytes_per_s_per_gpu, rel=1e-15)
    assert comms.group(half, 8, 1).bus_bytes_per_s == comms.group(full, 8, 1).bus_bytes_per_s
    assert math.isclose(comms.group(half, 4, 8).bus_bytes_per_s * 2, comms.group(full, 4, 8).bus_bytes_per_s)


def test_groups_that_do_not_tile_the_domain_straddle():
    """TP 16 in 72-GPU racks: the fifth group of each pair of racks (GPUs 64-79) straddles two racks, 8 GPUs in each,
    and the step waits for it: its ring runs at 8 GPUs' NIC egress. In 64-GPU domains (16 of a rack's 18 trays) TP 16
    tiles the domain and stays on NVLink. Would catch a TP group priced on NVLink while half of it is in another
    rack."""
    rack = cluster("GB200", gpus_per_node=4, nodes=36, nvlink_domain=72)
    g = comms.group(rack, 16, 1)
    assert g.transport == "net" and g.per_node == 8
    assert g.bus_bytes_per_s == pytest.approx(min(comms.intra_bus_bytes_per_s(rack.intra), 8 * 50e9))
    tiled = cluster("GB200", gpus_per_node=4, nodes=32, nvlink_domain=64)
    assert comms.group(tiled, 16, 1).transport == "nvlink"
