"""placement: what the alpha-beta model says about where each kind of parallelism may live.

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, Section 3) all-reduces the activations of every
layer: two all-reduces of b*s*h values in forward (after attention and after the MLP) and two in backward,
4L per micro-batch, on the critical path. Data parallelism all-reduces the gradients once per step and
can overlap them with backward. Hence the rule: TP inside the NVLink domain, DP (and PP) across nodes.

A ring that spans nodes (a flat ring) is limited by what one node can push out: each of its channels
crosses the node boundary once per direction, so its per-rank bandwidth is min(B_intra, k * B_nic) for
a group holding k GPUs of a node (one NIC each, DGX H100's layout).
"""

from __future__ import annotations

from distlab.core.facts import fact
from distlab.hardware.collectives import link_time_seconds
from distlab.hardware.links import Link, link
from distlab.models.shapes import preset

BF16_BYTES = 2


ASSUMED_MFU = 0.4  # a typical large-scale MFU (chapter 12 measures what is reachable); only scales compute time


TP_ALLREDUCES_PER_LAYER = 4  # 2 forward (attention output, MLP output) + 2 backward (their conjugates)


DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel(bucket_cap_mb=25), PyTorch's default bucket


def flat_ring_link(
    gpus_per_node: int,
    intra: str | Link = "NVLink4-H100",
    inter: str | Link = "InfiniBand-NDR",
    nodes: int = 2,
    nics_per_node: int | None = None,
) -> Link:
    """The effective link of a ring collective over `nodes` nodes with `gpus_per_node` of the group's GPUs in each.
    NCCL runs one ring per NIC, so a node's egress is its NICs x B_nic: per rank, min(B_intra, rings x B_nic) with
    rings = min(gpus_per_node, NICs). `nics_per_node` defaults to one per GPU of the group (a DGX: a NIC per GPU);
    a node with one NIC for all its GPUs (nics_per_node=1) is the named exception, every ring through one port.
    The latency is the network's per step."""
    a = intra if isinstance(intra, Link) else link(intra)
    b = inter if isinstance(inter, Link) else link(inter)
    if nodes == 1:
        return a
    nics = gpus_per_node if nics_per_node is None else nics_per_node
    if nics < 1:
        raise ValueError(f"nics_per_node must be >= 1, got {nics_per_node}")
    rings = min(gpus_per_node, nics)
    return Link(
        name=f"ring over {nodes} nodes" + (f", {nics} NIC(s) per node" if nics_per_node is not None else ""),
        bandwidth_bytes_per_s=min(a.bandwidth_bytes_per_s, rings * b.bandwidth_bytes_per_s),
        alpha_s=b.alpha_s,
        transport="net",
    )


def tp_step_seconds(
    model: str,
    tp: int,
    gpus_per_node: int,
    micro_batch: int = 1,
    intra: str = "NVLink4-H100",
    inter: str = "InfiniBand-NDR",
) -> dict[str, float]:
    """Tensor-parallel communication of one micro-batch (forward + backward) for a TP group of `tp` GPUs
    with `gpus_per_node` of them per node, against the compute of that micro-batch."""
    m = preset(model)
    if tp % gpus_per_node:
        raise ValueError(f"tp={tp} must be a multiple of gpus_per_node={gpus_per_node}")
    nodes = tp // gpus_per_node
    message = micro_batch * m.seq * m.hidden * BF16_BYTES
    lk = flat_ring_link(gpus_per_node, intra, inter, nodes)
    per_allreduce = link_time_seconds("all-reduce", message, tp, lk)
    count = TP_ALLREDUCES_PER_LAYER * m.layers
    peak = fact("gpus.H100-SXM.bf16_dense_tflops").value * 1e12
    compute_peak = 6 * m.params() * micro_batch * m.seq / (tp * peak)
    return {
        "message_bytes": message,
        "allreduces": count,
        "per_allreduce_s": per_allreduce,
        "comm_s": count * per_allreduce,
        "compute_peak_s": compute_peak,
        "compute_s": compute_peak / ASSUMED_MFU,
        "bandwidth_bytes_per_s": lk.bandwidth_bytes_per_s,
    }
