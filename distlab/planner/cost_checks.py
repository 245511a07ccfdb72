"""Chapter 14's cost terms that are not compute, each from its definition: the DDP bucket against PyTorch's own
default, tensor parallelism's exposed collectives counted op by op (four per layer and pass with sequence
parallelism, each of one micro-batch's activations), and CPU offload's transfers and host update from the PCIe
link, the node's host DRAM and the bytes an AdamW update touches. The collective times come from the planner's
NCCL model (planner.comms, claimed on chapters 9 and 12), the backward a transfer hides behind from the cost model;
the counts, bytes and the way they combine are written out here, apart from distlab.planner.cost.
"""

from __future__ import annotations

import math

from distlab.core.results import Result, worst_relative_gap


def tp_exposed_by_hand(m, c, t, plan) -> float:
    """A plan's exposed tensor-parallel seconds per step without overlap: per micro-batch and layer, an all-gather
    before the QKV and MLP-up GEMMs and a reduce-scatter after the projection and MLP-down, in the forward and
    again in the backward, each moving the micro-batch's bf16 activations (tokens x hidden x 2 B)."""
    from distlab.planner import comms

    assert not t.tp_overlap and t.sequence_parallel, "the count below is for sequence parallelism without overlap"
    act = plan.micro_batch * t.seq * m.hidden * 2
    g = comms.group(c, plan.tp, 1)
    per_layer = 2 * comms.seconds("all-gather", act, g) + 2 * comms.seconds("reduce-scatter", act, g)
    return plan.microbatches * m.layers * 2 * per_layer


def offload_by_hand(local_params: int, c, plan, backward: float) -> float:
    """ZeRO-Offload's exposed seconds per step: the bf16 gradient shard down PCIe every micro-step (what the
    micro-step's backward does not cover), the host's AdamW over the shard (read the bf16 gradient, fp32 master, m
    and v; write them and the bf16 weights: 2 + 12 + 12 + 2 B per parameter, the node's GPUs sharing its DRAM), the
    bf16 weights back up PCIe."""
    shard = math.ceil(local_params / plan.dp)
    pcie, host = c.pcie.bandwidth_bytes_per_s, c.host_bytes_per_s / c.gpus_per_node
    down = 2 * shard / pcie
    return plan.microbatches * max(0.0, down - backward) + shard * (2 + 12 + 12 + 2) / host + 2 * shard / pcie


def zero1_exposed_by_hand(params: int, c, t, plan, forward: float, backward: float, bucket: int) -> float:
    """ZeRO-1's exposed data-parallel seconds per step (mixed precision: bf16 gradients and weights on the wire):
    the gradients' reduce-scatter hides behind the last micro-batch's backward and its last bucket cannot, the
    updated weights' all-gather hides behind the next forward; what hides still takes the SMs NCCL's channels run
    on (32 of the GPU's SMs)."""
    from distlab.planner import comms

    g = comms.group(c, plan.dp, plan.tp)
    tax = 32 / c.gpu.sms  # NCCL's channels, one SM each (NVIDIA/nccl issue 1685's log)

    def over(comm: float, under: float) -> float:
        hidden = min(comm, under)
        return comm - hidden + tax * hidden

    rs = comms.seconds("reduce-scatter", 2 * params, g)
    last = comms.seconds("reduce-scatter", min(bucket, 2 * params), g)
    return over(rs, backward) + last + over(comms.seconds("all-gather", 2 * params, g), forward)


def check_cost_terms(r: Result, m, c, t, plans: dict, local_params: int, torch_bucket_bytes: int) -> None:
    """The TP 8 and offloaded strategies' exposed TP and offload seconds, and the DDP bucket cap, against the
    references above. `plans` is the strategy table's {name: (plan, memory, estimate)}; `local_params` the 7B
    model's parameters (TP 1, no pipeline); `torch_bucket_bytes` DDP's default cap as the installed PyTorch has it
    (read by the experiment: a formula module imports no torch)."""
    from distlab.planner.cost import DDP_BUCKET_BYTES, stage_time

    tp8 = plans["TP 8 (no ZeRO)"]
    off = plans["ZeRO-3 + CPU offload"]
    p = off[0]
    backward = stage_time(m, c, t, p, m.layers, first=True, last=True).backward
    z1 = plans["ZeRO-1"]
    micro = stage_time(m, c, t, z1[0], m.layers, first=True, last=True)
    pairs = [
        (
            z1[2].time.breakdown.exposed_dp,
            zero1_exposed_by_hand(local_params, c, t, z1[0], micro.forward, micro.backward, torch_bucket_bytes),
        ),
        (DDP_BUCKET_BYTES, torch_bucket_bytes),
        (tp8[2].time.breakdown.exposed_tp, tp_exposed_by_hand(m, c, t, tp8[0])),
        (off[2].time.breakdown.offload, offload_by_hand(local_params, c, p, backward)),
    ]
    r.claim(
        "chapter 14's cost terms by hand: ZeRO-1's exposed data-parallel time, DDP's bucket cap = PyTorch's default, "
        "TP 8's exposed collectives (4 per layer and pass), the offloaded plan's PCIe transfers and host AdamW "
        "(worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="n L 2 (2 AG + 2 RS) of s b h 2 B; n max(0, 2S/PCIe - bwd) + 28 S / (DRAM / GPUs) + 2S/PCIe",
    )
