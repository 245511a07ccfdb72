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
from distlab.planner.worked_plan_checks import edge_params, layer_params


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


def sharded_exposed_by_hand(params: int, layer: int, layers: int, c, plan, forward: float, backward: float) -> float:
    """ZeRO-2 / ZeRO-3 (FSDP) without a pipeline, exposed seconds per step: every micro-batch gathers each layer's
    bf16 weights before its forward (ZeRO-3 again before its backward) and reduce-scatters its bf16 gradients after
    its backward, each hidden behind one layer's share of the pass (taking NCCL's SMs while it hides); the first
    layer's gather, and the embedding's and head's gather and reduce-scatter (once per micro-batch, outside the
    layers), have nothing to hide behind."""
    from distlab.planner import comms

    assert plan.pp == 1 and plan.dp_replicate == 1 and plan.zero in (2, 3)
    g = comms.group(c, plan.dp, plan.tp)
    tax = 32 / c.gpu.sms

    def over(comm: float, under: float) -> float:
        return comm - min(comm, under) + tax * min(comm, under)

    per_layer = math.ceil(layer / plan.tp)
    ends = params - layers * per_layer
    ag, rs = comms.seconds("all-gather", 2 * per_layer, g), comms.seconds("reduce-scatter", 2 * per_layer, g)
    second = ag if plan.zero == 3 else 0.0
    per_micro = ag + comms.seconds("all-gather", 2 * ends, g) + comms.seconds("reduce-scatter", 2 * ends, g)
    per_micro += layers * (over(ag, forward / layers) + over(second + rs, backward / layers))
    return plan.microbatches * per_micro


def embedding_by_hand(m, c, t, plan) -> tuple[float, float]:
    """The embedding's (forward, backward) seconds per micro-batch, memory-bound: the forward reads the tokens' bf16
    rows and writes them; the backward zeroes this rank's V/tp x h slice of the gradient, reads the output's
    gradient, and reads and writes the rows it adds into."""
    from distlab.planner.kernels import MEMORY_EFFICIENCY

    hbm = c.gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY
    rows = plan.micro_batch * t.seq // plan.cp * m.hidden * 2
    return 2 * rows / hbm, (math.ceil(m.vocab / plan.tp) * m.hidden * 2 + 3 * rows) / hbm


def embedding_in_the_model(m, c, t, plan) -> tuple[float, float]:
    """What the cost model adds for the embedding: a one-layer stage timed as the first stage less the same stage
    timed as a middle one."""
    from distlab.planner.cost import stage_time

    first = stage_time(m, c, t, plan, 1, first=True, last=False)
    middle = stage_time(m, c, t, plan, 1, first=False, last=False)
    return first.forward - middle.forward, first.backward - middle.backward


def pipeline_ends_by_hand(m, c, t, plan, est) -> list[tuple[float, float]]:
    """(the cost model's, by hand) pairs for a pipelined plan of equal stages: the first stage is a middle stage
    plus the embedding (forward: read the tokens' bf16 rows, write them; backward: zero the V x h gradient, read the
    output's gradient, read and write the rows), the last a middle stage plus the head's GEMMs (T x h by h x V
    forward, two of the same size backward) and the loss's bytes per logit; the step's compute is the slowest
    stage's passes (no TP, no recompute); stage to stage, one micro-batch's bf16 activations (T x h x 2 B) inside
    the NVLink domain when the job fits in it."""
    from distlab.gpu.block_bytes import loss_bytes_per_logit
    from distlab.planner import comms
    from distlab.planner.kernels import FRAMEWORKS, MEMORY_EFFICIENCY, gemm_seconds

    assert plan.tp == plan.cp == 1 and plan.pp > 2 and plan.recompute == "none"
    fwd, bwd = est.stage_forward_seconds, est.stage_backward_seconds
    tokens, hbm = plan.micro_batch * t.seq, c.gpu.hbm_bytes_per_s * MEMORY_EFFICIENCY
    rows = tokens * m.hidden * 2
    emb_f, emb_b = embedding_by_hand(m, c, t, plan)
    loss_f, loss_b = loss_bytes_per_logit(FRAMEWORKS[t.kernels][1])
    head_f = gemm_seconds(c.gpu, tokens, m.vocab, m.hidden) + tokens * m.vocab * loss_f / hbm
    head_b = gemm_seconds(c.gpu, tokens, m.hidden, m.vocab) + gemm_seconds(c.gpu, m.hidden, m.vocab, tokens)
    head_b += tokens * m.vocab * loss_b / hbm
    slowest = max(range(plan.pp), key=lambda s: fwd[s] + bwd[s])
    return [
        (fwd[0] - fwd[1], emb_f),
        (bwd[0] - bwd[1], emb_b),
        (fwd[-1] - fwd[1], head_f),
        (bwd[-1] - bwd[1], head_b),
        (est.breakdown.compute, plan.microbatches * (fwd[slowest] + bwd[slowest])),
        (est.p2p_seconds, comms.p2p_seconds(c, rows, plan.gpus > c.domain)),
    ]


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
    tp2 = plans["TP 2 x ZeRO-3"][0]
    embedding = zip(embedding_in_the_model(m, c, t, tp2), embedding_by_hand(m, c, t, tp2))  # the V/tp slice
    pp4 = plans["PP 4 x DP 2, ZeRO-1"]
    stage = pp4[2].time
    blocks = m.layers // pp4[0].pp * layer_params("7B")  # the largest stage: the last, its blocks and the head
    pairs = [
        *pipeline_ends_by_hand(m, c, t, pp4[0], stage),
        *embedding,
        (
            stage.breakdown.exposed_dp,
            zero1_exposed_by_hand(
                blocks + edge_params("7B", 0, False, True, pp4[0].pp),
                c,
                t,
                pp4[0],
                stage.stage_forward_seconds[0],
                stage.stage_backward_seconds[0],
                torch_bucket_bytes,
            ),
        ),
        *(
            (
                e.time.breakdown.exposed_dp,
                sharded_exposed_by_hand(
                    math.ceil(local_params / plan.tp),
                    layer_params("7B"),
                    m.layers,
                    c,
                    plan,
                    e.time.forward_seconds,
                    e.time.backward_seconds,
                ),
            )
            for plan, _, e in (plans[k] for k in ("ZeRO-2", "ZeRO-3 / FSDP", "TP 2 x ZeRO-3"))
        ),
        (
            z1[2].time.breakdown.exposed_dp,
            zero1_exposed_by_hand(local_params, c, t, z1[0], micro.forward, micro.backward, torch_bucket_bytes),
        ),
        (DDP_BUCKET_BYTES, torch_bucket_bytes),
        (tp8[2].time.breakdown.exposed_tp, tp_exposed_by_hand(m, c, t, tp8[0])),
        (off[2].time.breakdown.offload, offload_by_hand(local_params, c, p, backward)),
    ]
    r.claim(
        "chapter 14's cost terms by hand: ZeRO-1's exposed data-parallel time (alone and under PP 4), ZeRO-2's and "
        "ZeRO-3's per-layer gathers and reduce-scatters, DDP's bucket cap = PyTorch's default, TP 8's exposed "
        "collectives (4 per layer and pass), the offloaded plan's PCIe transfers and host AdamW, PP 4's embedding, "
        "head, compute and stage-to-stage sends (worst relative gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-9,
        formula="n L 2 (2 AG + 2 RS) of s b h 2 B; n max(0, 2S/PCIe - bwd) + 28 S / (DRAM / GPUs) + 2S/PCIe; "
        "embedding 2Th2 B forward, (Vh + 3Th)2 B backward; head 2ThV at the GEMM rate",
    )
