"""The planner's cost model: step time by cause for one plan (and, through distlab.planner.memory, its memory).

Memory per GPU, by category and by phase (forward, backward, optimizer step; the peak is the largest phase):
distlab.planner.memory, whose names (memory_per_gpu, MemoryBreakdown, fits) this module re-exports.

Step time (seconds), `step`: each stage's time per micro-batch (distlab.planner.kernels: matmuls at the measured
sustained rate and their wave efficiency, FlashAttention at its published rate, memory-bound kernels at a share of HBM),
plus what its tensor-, context- and expert-parallel collectives leave exposed (distlab.planner.comms), fed to the
pipeline simulator (distlab.model_parallel.pipeline: 1F1B, interleaved or ZB-H1); then the data-parallel and
ZeRO collectives that compute cannot hide, CPU offload's transfers, and the optimizer's pass over its shard.

Overlap, as the frameworks do it:
- TP (with tp_overlap): each all-gather / reduce-scatter is split into t chunks that run under the t chunks of
  the GEMM next to it (collective matmul); t - 1 chunks hide, so what shows is what the comm exceeds of
  (t-1)/t of that GEMM. Without tp_overlap every TP collective is on the critical path.
- ZeRO-3/FSDP: one all-gather per layer in forward, one in backward and one reduce-scatter per layer, every
  micro-batch, each paying its own latency; a layer's gather hides behind the previous layer's compute, the
  backward's gather and reduce-scatter behind that layer's backward, and the first layer's gather has nothing to
  hide behind. With pipelines (torchtitan's FSDP + PP) each stage's weights are gathered once per step and kept,
  its gradients accumulate unsharded and are reduce-scattered once: ZeRO-1's memory and traffic plus one gather.
- DDP and ZeRO-1: the gradient reduction hides behind the last micro-batch's backward but its last bucket; ZeRO-1
  gathers the updated parameters behind the next forward. ZeRO-2 (FSDP's SHARD_GRAD_OP) gathers each layer's weights
  in every micro-batch's forward and keeps them to its backward, and reduce-scatters each layer's gradients there.
  Where the training code reduces only after the backward (Megatron-LM 2021's local DDP, DeepSpeed's pipeline
  engine: Training.grad_reduce_overlap off), the reduction is exposed whole.
- CP: ring attention's K/V exchange under the attention of the chunk before. EP: all-to-alls are exposed.
- CPU offload: the gradient shard crosses PCIe every micro-step (under its backward), the update runs on the
  host (a memory-bound pass over host DRAM), the parameters come back before the next forward.
- Stragglers: the step ends when the slowest of its N ranks does; with each rank's time jittering by
  Cluster.rank_jitter the expected step is the rest x (1 + jitter x E[Z_(N)]) (distlab.planner.scale_costs).

MFU counts model FLOPs 6N + 12Lhs per token (attention over all s x s scores, the published convention);
`mfu_causal` counts causal attention as half; `hfu` counts what the GPUs execute (recomputation included);
`tflops_per_gpu` is the model FLOP/s per GPU. Pure Python: no numpy, no torch.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from distlab.gpu.flops import attention_flops_per_token, flops_per_token
from distlab.model_parallel.pipeline import bubble_fraction, simulate
from distlab.models.shapes import ModelShape
from distlab.planner import comms
from distlab.planner.config import Cluster, Plan, Training
from distlab.planner.kernels import (
    MEMORY_EFFICIENCY,
    head_times,
    layer_shape,
    layer_times,
    mamf_fraction,
)
from distlab.planner.memory import (  # noqa: F401  (re-exported: the memory model's names, as before)
    MemoryBreakdown,
    _activations,
    _states,
    activation_bytes,
    communicators,
    fits,
    in_flight,
    memory_per_gpu,
    state_bytes_per_param,
)
from distlab.planner.scale_costs import straggler_seconds
from distlab.planner.stages import expert_group, layer_params_local, split_params, stage_layers, stage_params

DDP_BUCKET_BYTES = 25 * 2**20  # DistributedDataParallel(bucket_cap_mb=25): the last bucket waits for backward


# ---------------------------------------------------------------- typed results
@dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one optimizer step by cause (they add up to the step)."""

    compute: float
    """Matmuls, attention and memory-bound kernels of every micro-batch on the slowest stage."""
    recompute: float
    exposed_tp: float
    exposed_dp: float
    """Data-parallel and ZeRO collectives compute does not hide."""
    exposed_cp_ep: float
    bubble: float
    """Pipeline idle time, point-to-point sends included."""
    offload: float
    optimizer: float
    stragglers: float = 0.0
    """Waiting for the slowest of the job's ranks: the rest of the step x jitter x E[Z_(N)]
    (distlab.planner.scale_costs, chapter 10's order statistic)."""

    @property
    def total(self) -> float:
        return (
            self.compute
            + self.recompute
            + self.exposed_tp
            + self.exposed_dp
            + self.exposed_cp_ep
            + self.bubble
            + self.offload
            + self.optimizer
            + self.stragglers
        )

    def as_dict(self) -> dict[str, float]:
        """`distlab plan --json`'s step_breakdown."""
        return {
            "compute": self.compute,
            "recompute": self.recompute,
            "exposed_tp": self.exposed_tp,
            "exposed_dp": self.exposed_dp,
            "exposed_cp_ep": self.exposed_cp_ep,
            "pipeline_bubble": self.bubble,
            "offload": self.offload,
            "optimizer": self.optimizer,
            "stragglers": self.stragglers,
        }


@dataclass(frozen=True)
class StepEstimate:
    """One plan's step: its time by cause, throughput and utilisation."""

    seconds: float
    breakdown: StepBreakdown
    tokens: int
    tokens_per_second: float
    model_flops: float
    """Model FLOPs of the step: (6N + 12Lhs) x tokens."""
    hardware_flops: float
    """What the GPUs execute, recomputation included."""
    mfu: float
    mfu_causal: float
    hfu: float
    tflops_per_gpu: float
    """Model TFLOP/s per GPU (LLM Foundry's and NeMo's "model TFLOP/s")."""
    forward_seconds: float
    """One micro-batch's forward on the slowest stage, exposed collectives included."""
    backward_seconds: float
    p2p_seconds: float
    traffic_seconds: dict[str, float] = field(default_factory=dict)
    """Total collective time per kind (tp, dp, cp, ep), hidden or not."""
    stage_forward_seconds: tuple[float, ...] = ()
    """One micro-batch's forward on each pipeline stage: what the pipeline simulator was given."""
    stage_backward_seconds: tuple[float, ...] = ()

    def time_by_component(self) -> dict[str, float]:
        """The breakdown under the names `distlab plan --json` has always printed in time_by_component."""
        b = self.breakdown
        return {
            "compute": b.compute,
            "recompute": b.recompute,
            "tensor-parallel (exposed)": b.exposed_tp,
            "data-parallel (exposed)": b.exposed_dp,
            "context/expert-parallel (exposed)": b.exposed_cp_ep,
            "pipeline bubble": b.bubble,
            "offload (exposed)": b.offload,
            "optimizer": b.optimizer,
            "stragglers (slowest of N ranks)": b.stragglers,
        }


# ---------------------------------------------------------------- model state per parameter
def optimizer_factor(t: Training) -> float:
    """The optimizer's state relative to AdamW's in the same precision (SGD keeps one moment, 8-bit AdamW two 1-byte
    ones: distlab.planner.memory.state_bytes_per_param)."""
    return (
        state_bytes_per_param(t.precision, t.optimizer)["optimizer"] / state_bytes_per_param(t.precision)["optimizer"]
    )


def grad_reduce_bytes(t: Training) -> int:
    """Bytes per gradient element the data-parallel reduction moves: the gradient's own dtype (fp32 with
    Megatron's main_grad and fp32 accumulation, bf16 otherwise)."""
    return int(state_bytes_per_param(t.precision)["grads"]) if t.precision != "mixed-fp32-accum" else 4


# ---------------------------------------------------------------- one stage, one micro-batch
_layer_times = functools.lru_cache(maxsize=65536)(layer_times)


@dataclass(frozen=True)
class StageTime:
    """Seconds of one micro-batch on one stage, by cause."""

    forward: float
    backward: float
    compute: float
    """Forward + backward kernels without recomputation."""
    recompute: float
    exposed_tp: float
    exposed_cp_ep: float
    traffic: dict[str, float]


NCCL_CHANNELS = 32
"""Thread blocks (one SM each) NCCL runs a collective on inside an H100 node: 32 channels per pair of GPUs
(NVIDIA/nccl issue 1685's NCCL_DEBUG log of 8 x H100). While a collective hides under compute, those SMs are the
compute's loss: the overlap tax."""


def sm_share(c: Cluster) -> float:
    """The share of the GPU's SMs an overlapped collective takes from the compute under it."""
    return min(1.0, NCCL_CHANNELS / c.gpu.sms)


def _tp_exposed(comm: float, gemm: float, tp: int, overlap: bool, tax: float) -> float:
    """What a TP collective of `comm` seconds next to a GEMM of `gemm` seconds adds: all of it without overlap;
    with overlap, what exceeds (t-1)/t of the GEMM plus the SMs its hidden part takes."""
    if not overlap:
        return comm
    hidden = min(comm, gemm * (tp - 1) / tp)
    return comm - hidden + tax * hidden


def stage_time(
    m: ModelShape,
    c: Cluster,
    t: Training,
    p: Plan,
    layers: int,
    *,
    first: bool,
    last: bool,
    hbm: float | None = None,
    share: float | None = None,
) -> StageTime:
    """One micro-batch through `layers` layers (plus the embedding on the first stage and the head on the last)."""
    tokens = p.micro_batch * t.seq // p.cp
    ls = layer_shape(m, tokens=tokens, kv_tokens=t.seq, micro_batch=p.micro_batch, tp=p.tp, sp=t.sequence_parallel, t=t)
    lt = _layer_times(m, c.gpu, ls, hbm, share)
    # tensor-parallel collectives per layer: with SP an all-gather before QKV and MLP-up, a reduce-scatter after
    # proj and MLP-down (forward; the same in backward); without SP an all-reduce after proj and after MLP-down
    act = tokens * m.hidden * 2
    g_tp = comms.group(c, p.tp, 1)
    gemm = dict(lt.gemms)
    if p.tp > 1:
        if ls.sequence_parallel:
            ag, rs = comms.seconds("all-gather", act, g_tp), comms.seconds("reduce-scatter", act, g_tp)
            pairs = [(ag, gemm["qkv"]), (rs, gemm["proj"]), (ag, gemm["mlp_up"]), (rs, gemm["mlp_down"])]
        else:
            ar = comms.seconds("all-reduce", act, g_tp)
            pairs = [(ar, gemm["proj"]), (ar, gemm["mlp_down"])]
    else:
        pairs = []
    tp_comm = sum(x for x, _ in pairs)
    tax = sm_share(c)
    tp_fwd = sum(_tp_exposed(x, g, p.tp, t.tp_overlap, tax) for x, g in pairs)
    tp_bwd = sum(_tp_exposed(x, 2 * g, p.tp, t.tp_overlap, tax) for x, g in pairs)  # backward GEMMs twice as long
    # context parallelism: ring attention passes K and V (cp - 1) times forward, K, V, dK, dV backward
    cp_f = cp_b = cp_comm = 0.0
    if p.cp > 1:
        g_cp = comms.group(c, 2, p.tp)  # neighbours of the ring
        kv = 2 * tokens * m.kv * m.head_dim * 2 / p.tp
        hop = comms.seconds("all-gather", 2 * kv, g_cp)  # one exchange of kv bytes each way on two ranks
        ring = (p.cp - 1) * hop
        cp_comm = 3 * ring
        hide_f, hide_b = lt.attention_forward * (p.cp - 1) / p.cp, lt.attention_backward * (p.cp - 1) / p.cp
        cp_f = max(0.0, ring - hide_f) + tax * min(ring, hide_f)
        cp_b = max(0.0, 2 * ring - hide_b) + tax * min(2 * ring, hide_b)
    # expert parallelism: dispatch and combine all-to-alls, forward and backward, every MoE layer
    ep_f = ep_b = ep_comm = 0.0
    moe = t.moe
    if moe is not None and p.ep > 1:
        g_ep = comms.group(c, p.ep, p.tp * p.cp)
        sent = tokens * moe.top_k * m.hidden * 2 / (p.tp if ls.sequence_parallel else 1)
        a2a = comms.alltoall_seconds(sent, g_ep)
        moe_share = moe.moe_layers(m.layers) / m.layers  # not `share`: that is the kernels' training share
        ep_f, ep_b = 2 * a2a * moe_share, 2 * a2a * moe_share
        ep_comm = 4 * a2a * moe_share
    # recomputation repeats the forward (full) or the attention core (selective; without FlashAttention also the
    # scores' memory traffic, which selective recompute exists to avoid keeping)
    if p.recompute == "full":
        rec = lt.forward + tp_fwd + cp_f + ep_f
    elif p.recompute == "selective":
        rec = lt.attention_forward if "core_attn" in t.recompute_modules else 0.0
        if "mlp" in t.recompute_modules or "moe" in t.recompute_modules:  # the MLP's GEMMs run twice
            rec += gemm["mlp_up"] + gemm["mlp_down"]
        if t.recompute_modules == ("op",):  # torchtitan's per-op policy reruns every second matmul: k, o, up or down
            kv, q = m.kv * m.head_dim, m.heads * m.head_dim
            rec = gemm["qkv"] * kv / (q + 2 * kv) + gemm["proj"]
            rec += gemm["mlp_up"] / 2 if m.mlp == "swiglu" else gemm["mlp_down"]
    else:
        rec = 0.0
    fwd = layers * (lt.forward + tp_fwd + cp_f + ep_f)
    bwd = layers * (lt.backward + tp_bwd + cp_b + ep_b + rec)
    compute = layers * (lt.forward + lt.backward)
    if first:  # the embedding, memory-bound: the forward reads the tokens' bf16 rows and writes them out; the
        # backward (a dense gradient, PyTorch's default) zeroes its vocabulary-slice gradient, reads the output's
        # gradient and adds it into the tokens' rows (a read and a write)
        hbm_rate = c.gpu.hbm_bytes_per_s * (hbm or MEMORY_EFFICIENCY)
        rows = tokens * m.hidden * 2
        emb_f = 2 * rows / hbm_rate
        emb_b = (math.ceil(m.vocab / p.tp) * m.hidden * 2 + 3 * rows) / hbm_rate
        fwd, bwd, compute = fwd + emb_f, bwd + emb_b, compute + emb_f + emb_b
    if last:
        hf, hb = head_times(m, c.gpu, tokens, p.tp, t.compute_dtype, hbm, t.kernels, share)
        fwd, bwd, compute = fwd + hf, bwd + hb, compute + hf + hb
    return StageTime(
        forward=fwd,
        backward=bwd,
        compute=compute,
        recompute=layers * rec,
        exposed_tp=layers * (tp_fwd + tp_bwd),
        exposed_cp_ep=layers * (cp_f + cp_b + ep_f + ep_b),
        traffic={"tp": layers * 2 * tp_comm, "cp": layers * cp_comm, "ep": layers * ep_comm},
    )


# ---------------------------------------------------------------- data parallelism, the optimizer, offload
def data_parallel_exposed(
    m: ModelShape, c: Cluster, t: Training, p: Plan, first: StageTime, layers: int
) -> tuple[float, float]:
    """(exposed seconds, total seconds) of the data-parallel and ZeRO collectives over the dp x cp group, for the
    stage with `layers` layers whose per-micro-batch time is `first`. A collective hidden under compute still costs
    the SMs it runs on (sm_share). Where the training code reduces after the backward (t.grad_reduce_overlap off:
    Megatron-LM 2021's local DDP, DeepSpeed's pipeline engine), nothing but FSDP's per-layer gathers hides.

    Hybrid sharding (p.dp_replicate > 1, FSDP2's HSDP): the gathers and reduce-scatters run over one replica's shard
    group (the inner ranks: inside the NVLink domain when it fits), and each reduce-scatter's output, the gradient
    shard, is then all-reduced across the replicas (outer ranks: usually the network), hidden where the
    reduce-scatter hides."""
    if p.dp * p.cp == 1:
        return 0.0, 0.0
    group = p.shard_group
    g = comms.group(c, group, p.tp)
    g_rep = comms.group(c, p.dp_replicate, p.tp * group)  # ranks 1 (no HSDP): every collective on it costs 0
    # an MoE's routed experts sync over the ranks that hold the same experts: dp x cp / ep, strided by tp x ep
    g_ex = comms.group(c, expert_group(p), p.tp * p.ep)
    tax = sm_share(c)

    def sync(kind: str, dense: float, routed: float) -> float:
        """One collective over the dense part's group, and one over the experts' group for their bytes."""
        return comms.seconds(kind, dense, g) + (comms.seconds(kind, routed, g_ex) if routed else 0.0)

    def hide(comm: float, under: float) -> float:
        hidden = min(comm, under) if t.grad_reduce_overlap or p.zero == 3 else 0.0  # FSDP always overlaps
        return comm - hidden + tax * hidden

    def reduce(grad_bytes: float, routed_bytes: float = 0.0) -> float:
        """Reduce-scatter over the shard group (the experts' over theirs), then the shard's all-reduce across
        replicas."""
        rs_ = sync("reduce-scatter", grad_bytes, routed_bytes)
        return rs_ + comms.seconds("all-reduce", grad_bytes / group + routed_bytes / expert_group(p), g_rep)

    params, routed = split_params(m, t.moe, p)
    gbytes = grad_reduce_bytes(t)
    n = p.microbatches
    fwd, bwd = first.forward, first.backward
    if p.zero == 0:
        total = sync("all-reduce", params * gbytes, routed * gbytes)
        last = comms.seconds("all-reduce", min(DDP_BUCKET_BYTES, params * gbytes), g) if t.grad_reduce_overlap else 0
        return hide(total, bwd) + last, total
    rs = reduce(params * gbytes, routed * gbytes)
    ag = sync("all-gather", params * 2, routed * 2)
    last = reduce(min(DDP_BUCKET_BYTES, params * gbytes)) if t.grad_reduce_overlap else 0
    if p.zero == 1 or (p.zero == 3 and p.pp > 1):
        extra = ag if p.zero == 3 else 0.0  # ZeRO-3 with pipelines: the step's gather before the first forward
        return hide(rs, bwd) + last + hide(ag, fwd) + extra, rs + ag + extra
    if p.zero == 2 and p.pp > 1:
        return n * (hide(rs, bwd) + last) + hide(ag, fwd), n * rs + ag
    # ZeRO-2 / FSDP SHARD_GRAD_OP and ZeRO-3 / FSDP FULL_SHARD: per layer, per micro-batch, each collective with its
    # own latency. SHARD_GRAD_OP keeps a layer's gathered weights from its forward to its backward: no second gather
    per_layer, routed_l = layer_params_local(m, t.moe, p)
    ag_l = sync("all-gather", per_layer * 2, routed_l * 2)
    rs_l = reduce(per_layer * gbytes, routed_l * gbytes)
    f_l, b_l = fwd / max(layers, 1), bwd / max(layers, 1)
    rest = params - layers * per_layer  # embedding and head: gathered once per micro-batch, outside the layers
    ag_rest = comms.seconds("all-gather", max(rest, 0) * 2, g)
    rs_rest = reduce(max(rest, 0) * gbytes)
    gathers = 2 if p.zero == 3 else 1
    exposed = ag_l + ag_rest  # the first layer's gather has nothing to hide behind
    exposed += layers * (hide(ag_l, f_l) + hide((gathers - 1) * ag_l + rs_l, b_l)) + rs_rest
    total = layers * (gathers * ag_l + rs_l) + gathers * ag_rest + rs_rest
    return n * exposed, n * total


def _shard(m: ModelShape, t: Training, p: Plan, zero: int | None = None) -> int:
    """Parameters whose update one GPU runs: the dense part's shard over dp x cp and the experts' over theirs."""
    params, routed = split_params(m, t.moe, p)
    if (p.zero if zero is None else zero) == 0:
        return params + routed
    return math.ceil(params / p.shard_group) + math.ceil(routed / expert_group(p))


def optimizer_seconds(m: ModelShape, c: Cluster, t: Training, p: Plan, hbm: float | None = None) -> float:
    """The update on the GPU: a memory-bound pass over the rank's shard (read gradients and optimizer state, write
    the state and the weights). With offload it runs on the host (offload_seconds)."""
    if p.offload != "none":
        return 0.0
    per = state_bytes_per_param(t.precision)
    shard = _shard(m, t, p)
    per_param = per["grads"] + 2 * per["optimizer"] * optimizer_factor(t) + per["params"]
    return shard * per_param / (c.gpu.hbm_bytes_per_s * (hbm or MEMORY_EFFICIENCY))


def offload_seconds(m: ModelShape, c: Cluster, t: Training, p: Plan, micro: StageTime) -> float:
    """CPU offload's exposed time per step: the gradient shard goes down PCIe every micro-step (hidden behind that
    micro-step's backward), the host updates its optimizer shard (a memory-bound pass over host DRAM, which the
    node's GPUs share), the bf16 parameters come back up; offloaded parameters also come up for every micro-step's
    forward and backward (hidden behind them)."""
    from distlab.sharding.offload import cpu_adam_bytes_per_param

    if p.offload == "none":
        return 0.0
    shard = _shard(m, t, p, zero=1)
    pcie = c.pcie.bandwidth_bytes_per_s
    per_gpu_host = c.host_bytes_per_s / c.gpus_per_node
    down = shard * 2 / pcie  # bf16 gradient shard, every micro-step
    exposed = p.microbatches * max(0.0, down - micro.backward)
    exposed += shard * cpu_adam_bytes_per_param() / per_gpu_host  # the update, on the host
    exposed += shard * 2 / pcie  # the updated bf16 parameters come back
    if p.offload == "params":
        fetch = 2 * shard * 2 / pcie  # forward and backward each fetch the parameter shard
        exposed += p.microbatches * max(0.0, fetch - micro.forward - micro.backward)
    return exposed


def activation_offload_seconds(m: ModelShape, c: Cluster, t: Training, p: Plan, micro: StageTime) -> float:
    """Activation offload's exposed time per step: each micro-batch's saved activations go to the host over PCIe
    during its forward and come back during its backward; what the link needs beyond the pass it hides under shows."""
    if not t.activation_offload:
        return 0.0
    saved = activation_bytes(m, t, p) * max(stage_layers(m, p.pp))
    link = saved / c.pcie.bandwidth_bytes_per_s
    return p.microbatches * (max(0.0, link - micro.forward) + max(0.0, link - micro.backward))


# ---------------------------------------------------------------- the step
def _p2p(m: ModelShape, c: Cluster, t: Training, p: Plan) -> float:
    if p.pp == 1:
        return 0.0
    across = p.tp * p.cp * p.dp >= c.domain  # consecutive stages sit in different NVLink domains
    act = t.seq // p.cp * p.micro_batch * m.hidden * 2 / (p.tp if t.sequence_parallel and p.tp > 1 else 1)
    return comms.p2p_seconds(c, act, across)


def step(
    m: ModelShape,
    c: Cluster,
    t: Training,
    p: Plan,
    *,
    exact_pipeline: bool = True,
    hbm: float | None = None,
    share: float | None = None,
) -> StepEstimate:
    """Step time by cause, tokens/s and utilisation for one plan (exact_pipeline: simulate the schedule op by op;
    otherwise its closed form, for searching; hbm and share override the memory-bound kernels' HBM efficiency and
    the tensor-core kernels' training share, for the calibration)."""
    layers = stage_layers(m, p.pp)
    cache: dict[tuple[int, bool, bool], StageTime] = {}  # stages alike in layers and role are timed once
    per_stage = []
    for s, n in enumerate(layers):
        key = (n, s == 0, s == p.pp - 1)
        if key not in cache:
            cache[key] = stage_time(m, c, t, p, n, first=key[1], last=key[2], hbm=hbm, share=share)
        per_stage.append(cache[key])
    slowest = max(range(p.pp), key=lambda s: per_stage[s].forward + per_stage[s].backward)
    worst = per_stage[slowest]
    n = p.microbatches
    busy = n * (worst.forward + worst.backward)
    p2p = _p2p(m, c, t, p)
    if p.pp == 1:
        pipeline = busy
    elif exact_pipeline:
        sim = simulate(
            p.pp,
            n,
            p.schedule,
            virtual=p.virtual,
            forward=[st.forward for st in per_stage],
            backward=[st.backward for st in per_stage],
            p2p=p2p,
        )
        pipeline = sim.step_time
    else:
        if p.schedule == "zb-h1":  # idle (p-1)(F + B - W) with B = W = half the backward
            idle = (p.pp - 1) * worst.forward
        else:
            idle = busy * bubble_fraction(p.pp, n, p.virtual) / (1 - bubble_fraction(p.pp, n, p.virtual))
        pipeline = busy + idle + 2 * (p.pp - 1) * p2p
    first = per_stage[0]
    dp_exposed, dp_total = data_parallel_exposed(m, c, t, p, first, layers[0])
    breakdown = StepBreakdown(
        compute=n * worst.compute,
        recompute=n * worst.recompute,
        exposed_tp=n * worst.exposed_tp,
        exposed_dp=dp_exposed,
        exposed_cp_ep=n * worst.exposed_cp_ep,
        bubble=pipeline - busy,
        offload=offload_seconds(m, c, t, p, worst) + activation_offload_seconds(m, c, t, p, worst),
        optimizer=optimizer_seconds(m, c, t, p, hbm),
    )
    breakdown = replace(breakdown, stragglers=straggler_seconds(breakdown.total, p.gpus, c.rank_jitter))
    seconds = breakdown.total
    tokens = n * p.micro_batch * t.seq * p.dp
    per_token = flops_per_token(m.params(), m.layers, m.hidden, t.seq)
    model_flops = per_token * tokens
    causal = model_flops - 0.5 * attention_flops_per_token(m.layers, m.hidden, t.seq) * tokens
    hardware = model_flops + _recompute_flops(m, t, p) * tokens
    peak = seconds * p.gpus * c.gpu.peak_flops("bf16")
    return StepEstimate(
        seconds=seconds,
        breakdown=breakdown,
        tokens=tokens,
        tokens_per_second=tokens / seconds,
        model_flops=model_flops,
        hardware_flops=hardware,
        mfu=model_flops / peak,
        mfu_causal=causal / peak,
        hfu=hardware / peak,
        tflops_per_gpu=model_flops / (seconds * p.gpus) / 1e12,
        forward_seconds=worst.forward,
        backward_seconds=worst.backward,
        p2p_seconds=p2p,
        traffic_seconds={
            "tp": n * worst.traffic["tp"],
            "dp": dp_total,
            "cp": n * worst.traffic["cp"],
            "ep": n * worst.traffic["ep"],
        },
        stage_forward_seconds=tuple(st.forward for st in per_stage),
        stage_backward_seconds=tuple(st.backward for st in per_stage),
    )


def clear_caches() -> None:
    """Forget every memoised timing and size (the planning-time benchmarks measure a cold search)."""
    for f in (stage_layers, stage_params, _states, _activations, _layer_times, comms.seconds):
        f.cache_clear()


def _recompute_flops(m: ModelShape, t: Training, p: Plan) -> float:
    """FLOPs per token recomputation adds: a second forward (2N + 4Lhs per token) or the attention core's."""
    if p.recompute == "none":
        return 0.0
    attention = attention_flops_per_token(m.layers, m.hidden, t.seq) / 3  # the forward's share of 12Lhs
    if p.recompute == "full":
        return flops_per_token(m.params()) / 3 + attention
    return attention


def gemm_efficiency(chip) -> float:
    """The largest share of the dense bf16 peak a matmul reaches: the measured MAMF's (chapter 2)."""
    return mamf_fraction(chip)
