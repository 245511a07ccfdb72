"""The planner's cost model: memory per GPU by category, and step time by cause, for one plan.

Memory (bytes, the most loaded pipeline stage):
    weights, gradients, optimizer     distlab.sharding.zero.model_state_bytes_per_gpu on the stage's share
                                      of the parameters (/ tp), sharded over dp x cp by the ZeRO stage
    activations                       distlab.memory.activations.activation_bytes_per_layer (Korthikanti et al.
                                      2022, Table 2) x layers per stage x micro-batches in flight (1F1B: p)
    logits                            fp32 logits of one micro-batch for the loss (last stage, / tp)
    gather buffers                    ZeRO-3: two layers' gathered bf16 weights (current and prefetched)

Step time (seconds) = the pipeline's step from distlab.model_parallel.pipeline.simulate (or its closed form while
searching) over per-micro-batch stage times, plus what data-parallel communication leaves exposed, plus
the optimizer step. A stage's time for one micro-batch is, layer by layer:

    matmul FLOPs / (peak x GEMM_EFFICIENCY)          forward 1x, backward 2x (FlashAttention's backward 2.5x)
  + non-matmul bytes / (HBM bandwidth x MEMORY_EFFICIENCY)   norms, residuals, activations, softmax, dropout
  + tensor-parallel all-reduces (alpha-beta, distlab.hardware.collectives), not overlapped
  + the context-parallel ring, where it exceeds the attention it hides behind
  + recomputation: full repeats the forward, selective the attention core

MFU follows the published convention (PaLM, Megatron): model FLOPs 6N + 12Lhs per token, the attention
term over the full s x s scores. A causal FlashAttention kernel skips the masked half, so the step is timed on
6Lhs; at long sequences, where 12Lhs rivals 6N, that MFU overstates the hardware's use and can pass 100 %.
`mfu_causal` counts causal attention as half (6N + 6Lhs): the work the model needs, never above the kernels'
share of the peak.

Two numbers are assumptions, not derived: GEMM_EFFICIENCY and MEMORY_EFFICIENCY (what fraction of the
datasheet peaks real kernels reach). A third is read from a published measurement: NCCL moves data over
NVLink at about 370 of its 450 GB/s line rate (protocol overhead), so NVLink-class links are derated by
that ratio. Everything else comes from the model's shape, the hardware data and the other chapters'
models. The validation chapter shows how the predictions move when the assumptions change.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from distlab.core.facts import value
from distlab.gpu.flops import attention_flops_per_token, flops_per_token, preset_matmul_params
from distlab.hardware.collectives import time_seconds
from distlab.hardware.gpus import GPU
from distlab.hardware.links import Link, per_direction_bytes_per_s
from distlab.interconnect.topology import DDP_BUCKET_BYTES, flat_ring_link
from distlab.memory.activations import activation_bytes_per_layer
from distlab.model_parallel.pipeline import bubble_fraction, simulate
from distlab.models.shapes import ModelShape
from distlab.planner.config import Cluster, Plan, Training
from distlab.sharding.zero import bytes_per_param_by_state, model_state_bytes_per_gpu

GEMM_FRACTION_OF_MAMF = 0.93  # training GEMM shapes against the best shape a matmul scan finds (see gemm_efficiency)
MEMORY_EFFICIENCY = 0.8  # element-wise and reduction kernels reach ~80 % of the HBM datasheet bandwidth
LOGIT_BYTES = 4  # fp32 logits for the loss
LOSS_BYTES_PER_LOGIT = 12  # cross-entropy over fp32 logits: write them, read for the max and the sum (forward)
FLASH_BACKWARD = 2.5  # FlashAttention's backward: 5 matmuls against the forward's 2 (it recomputes the scores)


@functools.cache
def nvlink_efficiency() -> float:
    """Effective over line-rate NVLink bandwidth that NCCL reaches (~0.82: protocol overhead)."""
    entry = "interconnect.nccl-nvlink4"
    return value(f"{entry}.effective_gbytes_per_s") * 1e9 / per_direction_bytes_per_s(value(f"{entry}.link"))


def effective(lk: Link) -> Link:
    """A link at the bandwidth collectives really get: NVLink-class links lose NCCL's protocol overhead."""
    if lk.transport != "nvlink":
        return lk
    return dataclasses.replace(lk, bandwidth_bytes_per_s=lk.bandwidth_bytes_per_s * nvlink_efficiency())


# The measured best matmul (MAMF) of each chip family; chips without a measurement borrow the H100's ratio.
MAMF_ENTRY = {"A100": "A100-SXM-80GB", "H100": "H100-SXM", "H200": "H100-SXM", "MI300X": "MI300X"}


def gemm_efficiency(chip: GPU) -> float:
    """Fraction of the dense bf16 peak that a training step's matmuls reach: GEMM_FRACTION_OF_MAMF of the best
    matmul measured on that chip family (A100 0.86, H100 0.80 of peak), ~0.80 on an A100. The best shape
    fills every SM in whole waves; a layer's shapes do not, and their K is often smaller."""
    family = next((k for k in MAMF_ENTRY if chip.name.startswith(k)), "H100")
    entry = MAMF_ENTRY[family]
    from distlab.hardware.gpus import gpu

    return GEMM_FRACTION_OF_MAMF * value(f"gpus.{entry}.bf16_mamf_tflops") * 1e12 / gpu(entry).peak_flops("bf16")


def attention_efficiency(chip: GPU, gemm: float) -> float:
    """FlashAttention's published share of the peak: FA2 reaches 50-73 % on an A100 (we take 50 %: the
    backward is the slow half), FA3 75 % on an H100; elsewhere, and never above, the GEMMs' share."""
    if chip.name.startswith("A100"):
        return min(gemm, value("flash_attention.FA2.a100_peak_fraction_low"))
    if chip.name.startswith(("H100", "H200")):
        return min(gemm, value("flash_attention.FA3.fp16_peak_fraction"))
    return gemm


def efficiencies(chip: GPU, gemm: float | None = None, memory: float | None = None) -> tuple[float, float]:
    return (gemm_efficiency(chip) if gemm is None else gemm), (MEMORY_EFFICIENCY if memory is None else memory)


# ---------------------------------------------------------------- parameters per GPU
def stage_params(m: ModelShape, pp: int) -> tuple[float, float]:
    """Parameters of the first stage (its layers and the token embedding) and of the last (its layers, the
    output head unless tied, the final norm). With pp = 1 both are the whole model."""
    if pp == 1:
        return float(m.params()), float(m.params())
    layers = m.layers / pp * m.params_per_layer()
    embed = m.vocab * m.hidden + (m.seq * m.hidden if m.mlp == "gelu" else 0)
    head = (m.vocab * m.hidden if m.tie_embeddings or pp > 1 else 0) + m.hidden  # PP unties a tied head
    return layers + embed, layers + head


def local_params(m: ModelShape, p: Plan) -> int:
    """Parameters one GPU holds a slice of: its stage's (the larger of first and last) / tp."""
    return math.ceil(max(stage_params(m, p.pp)) / p.tp)


def optimizer_factor(t: Training) -> float:
    """SGD with momentum keeps one fp32 moment where AdamW keeps two (chapter 1's categories)."""
    if t.optimizer == "adamw":
        return 1.0
    per = bytes_per_param_by_state(t.precision)
    return (per["optimizer"] - 4) / per["optimizer"]


# ---------------------------------------------------------------- memory
def memory(m: ModelShape, c: Cluster, t: Training, p: Plan) -> dict[str, float]:
    """Bytes per GPU by category on the most loaded stage, and host bytes per GPU (offload)."""
    states = model_state_bytes_per_gpu(
        local_params(m, p),
        p.dp * p.cp,
        p.zero,
        precision=t.precision,
        offload_optimizer=p.offload != "none",
        offload_params=p.offload == "optimizer+params",
    )
    sp = t.sequence_parallel and p.tp > 1
    recompute = "selective" if (t.attention == "flash" and p.recompute == "none") else p.recompute
    per_layer = activation_bytes_per_layer(
        t.seq // p.cp, p.micro_batch, m.hidden, m.heads, tp=p.tp, sequence_parallel=sp, recompute=recompute
    )
    layers = m.layers // p.pp
    working = 0.0
    if p.recompute == "full":  # backward recomputes one layer at a time: its activations live meanwhile
        working = activation_bytes_per_layer(
            t.seq // p.cp, p.micro_batch, m.hidden, m.heads, tp=p.tp, sequence_parallel=sp, recompute="selective"
        )
    logits = t.seq // p.cp * p.micro_batch * m.vocab * LOGIT_BYTES / p.tp
    first = per_layer * layers * min(p.pp, p.microbatches) + working  # 1F1B: stage 0 holds p micro-batches
    last = per_layer * layers + working  # the last stage holds one, and the logits
    if p.pp == 1 or last + logits <= first:  # report the heavier stage: the first, or the last with its logits
        act, logits = first, (logits if p.pp == 1 else 0.0)
    else:
        act = last
    out = {
        "weights": states["params_bytes"],
        "gradients": states["grads_bytes"],
        "optimizer": states["optimizer_bytes"] * optimizer_factor(t),
        "activations": act,
        "logits": logits,
        "gather buffers": 2 * 2 * m.params_per_layer() / p.tp if p.zero == 3 else 0.0,
    }
    out["host"] = states["host_bytes"]
    return out


def device_bytes(mem: dict[str, float]) -> float:
    return sum(v for k, v in mem.items() if k != "host")


# ---------------------------------------------------------------- compute of one layer and one micro-batch
def layer_work(m: ModelShape, t: Training, p: Plan) -> dict[str, float]:
    """Forward FLOPs and HBM bytes of one layer on one GPU for one micro-batch: matmuls, the attention core
    (its matmuls and, without FlashAttention, the s x s scores through memory), and element-wise bytes."""
    h, f, b = m.hidden, m.ffn, p.micro_batch
    s_q, s_kv = t.seq // p.cp, t.seq  # a context-parallel rank holds s/cp queries against all keys
    tokens = b * s_q
    kvw = m.kv * m.head_dim
    split = p.tp if (t.sequence_parallel and p.tp > 1) else 1  # what tensor parallelism alone leaves whole
    matmul = 2 * tokens * (preset_matmul_params(m) - m.vocab * h) / m.layers / p.tp
    flash = t.attention == "flash"
    core = 4 * b * s_q * s_kv * h / p.tp * (0.5 if flash else 1.0)  # QK^T and PV; FlashAttention skips masked tiles
    drop = 1 if t.dropout else 0
    # bytes per token: two norms (read + write), two residual adds (+ dropout mask), the MLP activation
    per_token = (2 * 4 * h + 2 * (6 + drop) * h) / split
    per_token += (6 * f if m.mlp == "swiglu" else 4 * f) / p.tp  # SwiGLU reads gate and up, writes one; GeLU r+w
    if m.mlp == "swiglu":
        per_token += 4 * (h + kvw) / p.tp  # rotary embeddings on q and k (read + write)
    if flash:
        per_token += 2 * (2 * h + 2 * kvw) / p.tp  # the kernel reads q, k, v and writes o, once
        scores = 0.0
    else:  # scores written, softmax read + written, (dropout r + w + mask), read by PV; all heads
        scores = m.heads / p.tp * s_q * s_kv * b * (2 + 4 + 5 * drop + 2)
    return {
        "matmul_flops": matmul,
        "core_flops": core,
        "pointwise_bytes": per_token * tokens,
        "scores_bytes": scores,
        "tokens": tokens,
    }


def head_work(m: ModelShape, t: Training, p: Plan) -> dict[str, float]:
    """The output projection and the loss on the last stage, forward, one micro-batch."""
    tokens = p.micro_batch * t.seq // p.cp
    return {"flops": 2 * tokens * m.vocab * m.hidden / p.tp, "bytes": tokens * m.vocab / p.tp * LOSS_BYTES_PER_LOGIT}


def _comm(op: str, message: float, ranks: int, lk: Link) -> float:
    return time_seconds(op, message, ranks, alpha_s=lk.alpha_s, bandwidth_bytes_per_s=lk.bandwidth_bytes_per_s)


def stage_times(
    m: ModelShape, c: Cluster, t: Training, p: Plan, gemm: float | None = None, mem_eff: float | None = None
) -> dict[str, float]:
    """Seconds of one micro-batch on the slowest stage: forward and backward, split by cause."""
    ge, me = efficiencies(c.gpu, gemm, mem_eff)
    ae = attention_efficiency(c.gpu, ge) if t.attention == "flash" else ge
    peak, hbm = c.gpu.peak_flops("bf16" if t.precision == "mixed" else "tf32"), c.gpu.hbm_bytes_per_s
    w, hd = layer_work(m, t, p), head_work(m, t, p)
    layers = m.layers // p.pp
    flops_s = lambda x: x / (peak * ge)
    core_s = lambda x: x / (peak * ae)
    bytes_s = lambda x: x / (hbm * me)
    tp_link = effective(c.intra if p.tp <= c.gpus_per_node else c.inter)
    act_bytes = w["tokens"] * m.hidden * (2 if t.precision == "mixed" else 4)
    tp_ar = 2 * _comm("all-reduce", act_bytes, p.tp, tp_link)  # two per layer per pass (attention, MLP)
    core_bwd = FLASH_BACKWARD if t.attention == "flash" else 2.0
    fwd = {
        "matmul": flops_s(w["matmul_flops"]) + core_s(w["core_flops"]),
        "memory-bound": bytes_s(w["pointwise_bytes"] + w["scores_bytes"]),
        "tensor-parallel": tp_ar,
    }
    bwd = {
        "matmul": flops_s(2 * w["matmul_flops"]) + core_s(core_bwd * w["core_flops"]),
        "memory-bound": bytes_s(2 * (w["pointwise_bytes"] + w["scores_bytes"])),
        "tensor-parallel": tp_ar,
    }
    if p.cp > 1:  # ring attention: K and V go round cp - 1 times forward; K, V, dK, dV backward
        cp_link = effective(c.intra if p.tp * p.cp <= c.gpus_per_node else c.inter)
        ring = (p.cp - 1) * _comm("broadcast", 2 * w["tokens"] * m.kv * m.head_dim * 2 / p.tp, 2, cp_link)
        fwd["context-parallel"] = max(0.0, ring - core_s(w["core_flops"]))
        bwd["context-parallel"] = max(0.0, 2 * ring - core_s(core_bwd * w["core_flops"]))
    recompute = {"full": sum(fwd.values()), "selective": core_s(w["core_flops"]) + bytes_s(w["scores_bytes"])}
    bwd["recompute"] = recompute.get(p.recompute, 0.0)
    out = {f"forward {k}": v * layers for k, v in fwd.items()} | {f"backward {k}": v * layers for k, v in bwd.items()}
    out["forward matmul"] += flops_s(hd["flops"])  # the head: on the last stage, which is the slowest
    out["forward memory-bound"] += bytes_s(hd["bytes"])
    out["backward matmul"] += flops_s(2 * hd["flops"])
    out["backward memory-bound"] += bytes_s(hd["bytes"])
    return out


# ---------------------------------------------------------------- the step
def data_parallel_exposed(
    m: ModelShape, c: Cluster, t: Training, p: Plan, forward_s: float, backward_s: float
) -> dict[str, float]:
    """Gradient (and ZeRO-3 parameter) collectives over the dp x cp group, and what compute cannot hide:
    DDP and ZeRO-1 reduce once per step behind the last micro-batch's backward (the last bucket is always
    exposed); ZeRO-1/2 gather the updated parameters behind the next forward; ZeRO-2 reduce-scatters and
    ZeRO-3 gathers and reduce-scatters every micro-batch, behind that micro-batch's compute."""
    group = p.dp * p.cp
    if group == 1:
        return {"seconds": 0.0, "total": 0.0}
    per_node = min(group, max(1, c.gpus_per_node // p.tp))
    lk = flat_ring_link(per_node, effective(c.intra), c.inter, nodes=math.ceil(group / per_node))
    grads = local_params(m, p) * (2 if t.precision == "mixed" else 4)
    ar, rs, ag = (_comm(op, grads, group, lk) for op in ("all-reduce", "reduce-scatter", "all-gather"))
    bucket = _comm("all-reduce", min(DDP_BUCKET_BYTES, grads), group, lk)
    n = p.microbatches
    if p.zero == 0:
        total, exposed = ar, max(0.0, ar - backward_s) + bucket
    elif p.zero == 1:
        total, exposed = rs + ag, max(0.0, rs - backward_s) + bucket + max(0.0, ag - forward_s)
    elif p.zero == 2:
        total, exposed = n * rs + ag, n * max(0.0, rs - backward_s) + bucket + max(0.0, ag - forward_s)
    else:
        first_layer = ag / m.layers  # the first gather has nothing to hide behind
        total = n * (2 * ag + rs)
        exposed = n * (max(0.0, ag - forward_s) + max(0.0, ag + rs - backward_s) + first_layer)
    return {"seconds": exposed, "total": total}


def optimizer_seconds(m: ModelShape, c: Cluster, t: Training, p: Plan, mem_eff: float | None = None) -> float:
    """The update: a memory-bound pass over the rank's shard (read gradients and optimizer state, write the
    state and the weights), on the GPU, or ZeRO-Offload's transfers and CPU update (distlab.sharding.offload)."""
    from distlab.sharding.offload import offload_seconds

    _, me = efficiencies(c.gpu, None, mem_eff)
    params = local_params(m, p)
    if p.offload != "none":
        return offload_seconds(
            params,
            p.dp * p.cp,
            gpus_per_node=c.gpus_per_node,
            pcie_bytes_per_s=c.pcie.bandwidth_bytes_per_s,
            host_bytes_per_s=c.host_bytes_per_s,
        )["zero_offload_s"]
    per = bytes_per_param_by_state(t.precision)
    shard = params if p.zero == 0 else math.ceil(params / (p.dp * p.cp))
    per_param = per["grads"] + 2 * per["optimizer"] * optimizer_factor(t) + per["params"]
    return shard * per_param / (c.gpu.hbm_bytes_per_s * me)


def step(
    m: ModelShape,
    c: Cluster,
    t: Training,
    p: Plan,
    *,
    exact_pipeline: bool = True,
    gemm: float | None = None,
    mem_eff: float | None = None,
) -> dict:
    """Step time by cause, tokens/s and MFU for one plan (exact_pipeline: simulate the schedule op by op;
    otherwise its closed form, for searching)."""
    st = stage_times(m, c, t, p, gemm, mem_eff)
    fwd = sum(v for k, v in st.items() if k.startswith("forward"))
    bwd = sum(v for k, v in st.items() if k.startswith("backward"))
    busy = p.microbatches * (fwd + bwd)
    p2p = 0.0
    if p.pp > 1:
        cross = p.tp * p.cp * p.dp >= c.gpus_per_node  # consecutive stages sit in different nodes
        lk = c.inter if cross else effective(c.intra)
        p2p = lk.alpha_s + t.seq // p.cp * p.micro_batch * m.hidden * 2 / p.tp / lk.bandwidth_bytes_per_s
        if exact_pipeline:
            pipeline = simulate(p.pp, p.microbatches, "1f1b", forward=fwd, backward=bwd, p2p=p2p).step_time
        else:
            bub = bubble_fraction(p.pp, p.microbatches)
            pipeline = busy / (1 - bub) + 2 * (p.pp - 1) * p2p
    else:
        pipeline = busy
    dpx = data_parallel_exposed(m, c, t, p, fwd - st["forward tensor-parallel"], bwd)
    parts = {k: p.microbatches * v for k, v in st.items() if v}
    parts["pipeline bubble"] = pipeline - busy
    parts["data-parallel (exposed)"] = dpx["seconds"]
    parts["optimizer"] = optimizer_seconds(m, c, t, p, mem_eff)
    if p.offload == "optimizer+params":  # the parameter shard comes over PCIe for forward and for backward
        pcie = 2 * 2 * math.ceil(local_params(m, p) / (p.dp * p.cp)) / c.pcie.bandwidth_bytes_per_s
        parts["parameter offload (exposed)"] = p.microbatches * max(0.0, pcie - fwd - bwd)
    seconds = sum(parts.values())
    tokens = p.microbatches * p.micro_batch * t.seq * p.dp
    model_flops = flops_per_token(m.params(), m.layers, m.hidden, t.seq) * tokens
    causal_flops = model_flops - 0.5 * attention_flops_per_token(m.layers, m.hidden, t.seq) * tokens
    peak = seconds * p.gpus * c.gpu.peak_flops("bf16")
    return {
        "step_seconds": seconds,
        "parts": parts,
        "tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "mfu": model_flops / peak,
        "mfu_causal": causal_flops / peak,
        "model_flops": model_flops,
        "forward_seconds": fwd,
        "backward_seconds": bwd,
        "p2p_seconds": p2p,
        "dp_traffic_seconds": dpx["total"],
    }
