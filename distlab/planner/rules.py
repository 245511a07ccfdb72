"""Chapter 7's decision rules for 3D (4D, 5D) parallelism, as the code the planner runs.

Each rule is a small function of the request (model shape, cluster, training settings: distlab.planner.config)
that returns a `Choice`: what it allows or picks, and one line saying why. The planner (distlab.planner.search)
enumerates its plans through them, so every `distlab plan` call applies them; memory and time come from
the planner's single cost model (distlab.planner.cost), never from a model of their own.

    tensor_sizes     TP inside the NVLink domain, in powers of two that divide the heads, the KV heads and
                     the FFN width (Narayanan et al. 2021, takeaway 1: its all-reduces are on every layer's
                     critical path, 2(t-1)F/(9hB) of its compute)
    context_sizes    CP only for long sequences (from LONG_SEQ tokens), in sizes that split the sequence
                     into 2c zigzag chunks
    pipeline_sizes   PP only when it is needed: when a pipeline-free plan at this TP and CP, with ZeRO-1
                     and no recomputation, does not fit with MIN_HEADROOM free (takeaway 2: PP across nodes for
                     larger models); otherwise a pipeline only adds its bubble
    MIN_HEADROOM     the headroom rule: a recommended plan leaves this share of usable memory free
    zero_stages      ZeRO-0/1 with a pipeline (stages 2 and 3 would re-gather every micro-batch), 0-3 without
    zero_stage       which ZeRO stage a plan needs: the lowest whose model states and activations fit
    replicate_sizes  hybrid sharding (HSDP) for ZeRO-2/3: none, or the shard group that fills the NVLink domain
                     (its per-layer gathers on NVLink) replicated across domains
    expert_parallel  for mixture-of-experts layers: the smallest EP, over data-parallel ranks, at which the
                     experts' states fit beside the dense plan; inside a node if it can be

Two rules prune: TP within a node and PP only when needed (CP from LONG_SEQ is the planner's long-standing
cut). `tests/test_parallel_rules.py` checks that the pruned search finds the same best plan as the
exhaustive one (`search(..., rules=())`) on the chapter's requests.

The experiment `parallel-rules` runs the planner, with these rules, on 7B-175B models and four clusters,
a long-sequence request and a mixture-of-experts request, and prints each rule's verdict beside the plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from distlab.models.shapes import ModelShape
from distlab.planner.config import Cluster, Plan, Training, usable_bytes
from distlab.planner.cost import memory_per_gpu

LONG_SEQ = 16384  # context parallelism is considered from this sequence length on

MIN_HEADROOM = 0.08
"""The headroom rule: a recommended plan leaves at least this share of the usable memory free. A stated margin,
not a measurement: the memory model leaves out backward temporaries, attention and GEMM workspaces, the fp32 logit
gradient, the longest batch's spikes and the allocator's retries (`num_alloc_retries`), each a few per cent; a
plan at 99 % of the budget OOMs on its first long batch. 8 % is the rule; `distlab plan --min-headroom` changes it."""


class Choice(NamedTuple):
    """What a rule allows (a list of sizes) or picks (one value), and why, in one line."""

    value: Any
    reason: str


def powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def budget_bytes(c: Cluster, t: Training) -> float:
    """Bytes a plan may fill on one GPU: the device's reported capacity less the CUDA context and a fragmentation
    margin (distlab.planner.config.usable_bytes)."""
    return usable_bytes(c.gpu)


# ---------------------------------------------------------------- the rules
def tensor_sizes(m: ModelShape, c: Cluster, *, within_node: bool = True) -> Choice:
    """TP sizes allowed: powers of two that divide the NVLink domain (every TP group inside one domain: a node on
    an HGX, a rack on a GB200 NVL72; the whole cluster if not within_node), the query heads, the KV heads, the FFN
    width and the GPU count."""
    limit = c.domain if within_node else c.gpus
    sizes = [
        tp
        for tp in powers_of_two(limit)
        if not (m.heads % tp or m.kv % tp or m.ffn % tp or c.gpus % tp or (within_node and c.domain % tp))
    ]
    where = f"inside the {c.domain}-GPU NVLink domain" if within_node else "anywhere"
    return Choice(
        sizes,
        f"TP in {{{', '.join(map(str, sizes))}}}: powers of two {where} that divide the "
        f"{m.heads} heads, {m.kv} KV heads and FFN width {m.ffn}",
    )


def context_sizes(m: ModelShape, c: Cluster, t: Training, tp: int, *, long_only: bool = True) -> Choice:
    """CP sizes allowed at tensor-parallel size tp: 1, and, for sequences of LONG_SEQ tokens or more (any
    length if not long_only), powers of two up to the GPUs left that split the sequence into 2c chunks."""
    if long_only and t.seq < LONG_SEQ:
        return Choice([1], f"no CP: {t.seq:,}-token sequences are shorter than {LONG_SEQ:,}")
    sizes = [cp for cp in powers_of_two(c.gpus // tp) if cp == 1 or t.seq % (2 * cp) == 0]
    return Choice(sizes, f"CP up to {sizes[-1]}: {t.seq:,}-token sequences, split into 2c zigzag chunks")


def fits_without_pipeline(
    m: ModelShape, c: Cluster, t: Training, tp: int, cp: int, min_headroom: float = MIN_HEADROOM
) -> tuple[bool, float]:
    """Does a pipeline-free plan at this TP and CP fit with ZeRO-1 (DDP when there is nothing to shard over),
    one sequence per micro-batch, as many micro-batches as the global batch needs (their gradients accumulate, so
    they are alive at every moment of backward) and no recomputation, leaving min_headroom of the budget free?
    Returns (fits, bytes per GPU)."""
    dp = c.gpus // (tp * cp)
    microbatches = max(1, t.global_batch_tokens // (dp * t.seq))
    plan = Plan(tp=tp, pp=1, dp=dp, cp=cp, zero=1 if dp * cp > 1 else 0, micro_batch=1, microbatches=microbatches)
    need = memory_per_gpu(m, c, t, plan).device_bytes
    return need <= (1 - min_headroom) * budget_bytes(c, t), need


def pipeline_sizes(
    m: ModelShape,
    c: Cluster,
    t: Training,
    tp: int,
    cp: int,
    *,
    only_when_needed: bool = True,
    min_headroom: float = MIN_HEADROOM,
) -> Choice:
    """PP sizes allowed at this TP and CP: the stage counts (up to the layer count; stages may hold unequal numbers
    of layers, as torchtitan's 126 layers on 8 stages do) that tile the GPUs, or only 1 when a pipeline-free
    ZeRO-1 plan without recomputation already fits with the headroom rule's margin (a pipeline would only add its
    bubble: it does not shrink the first stage's activations, and ZeRO-1 already shards the optimizer)."""
    sizes = [pp for pp in range(1, m.layers + 1) if c.gpus % (tp * cp * pp) == 0]
    if only_when_needed:
        fits, need = fits_without_pipeline(m, c, t, tp, cp, min_headroom)
        if fits:
            return Choice(
                [1],
                f"no PP: at TP {tp} ZeRO-1 fits without one ({need / 1e9:.1f} of {budget_bytes(c, t) / 1e9:.1f} GB"
                f", {1 - need / budget_bytes(c, t):.0%} free)",
            )
        return Choice(
            sizes,
            f"PP allowed: at TP {tp} ZeRO-1 without one needs {need / 1e9:.0f} GB of {budget_bytes(c, t) / 1e9:.1f}",
        )
    return Choice(sizes, f"PP in any of the {len(sizes)} stage counts up to {m.layers} layers that tile the GPUs")


def zero_stages(pp: int, group: int) -> Choice:
    """ZeRO stages to try: 0-3, with a pipeline too (ZeRO-1 is Megatron's distributed optimizer; ZeRO-2
    reduce-scatters each micro-batch's gradients; ZeRO-3 with a pipeline gathers each stage's weights once per step
    and keeps them, and reduce-scatters the gradients once at its end, as torchtitan's FSDP + PP does: ZeRO-1's
    memory and traffic plus the gather); only 0 (and offload's stages) when the group is one GPU."""
    stages = (0, 1, 2, 3)
    why = "ZeRO-0 to 3 (with a pipeline, ZeRO-3 gathers once per step)" if pp > 1 else "ZeRO-0 to 3"
    if group == 1:
        why += "; one GPU per group: sharding only with CPU offload"
    return Choice(stages, why)


def replicate_sizes(c: Cluster, tp: int, cp: int, dp: int, zero: int) -> Choice:
    """Hybrid-sharding replicas to try: 1 (the whole dp x cp group shards), and for ZeRO-2/3 the layout whose shard
    group is what one NVLink domain holds beside TP and CP (domain / (tp x cp) ranks), replicated dp / that times:
    its per-layer gathers and reduce-scatters stay on NVLink, only the gradient shards' all-reduce crosses the
    network (FSDP2's HSDP, the default of several stacks at scale)."""
    shard = c.domain // (tp * cp) if c.domain % (tp * cp) == 0 else 0
    if zero < 2 or shard < 1 or dp % shard or dp == shard:
        return Choice([1], "no hybrid sharding: the whole data-parallel group shards")
    return Choice([1, dp // shard], f"HSDP: shard over {shard} ranks inside the NVLink domain, {dp // shard} replicas")


def expert_sizes(moe, group: int) -> Choice:
    """EP sizes to try for a mixture-of-experts model: the powers of two that divide both its experts and the
    data x context-parallel ranks they are spread over; 1 for a dense model."""
    if moe is None:
        return Choice([1], "dense model: no EP")
    sizes = [e for e in powers_of_two(min(moe.experts, group)) if moe.experts % e == 0 and group % e == 0]
    return Choice(
        sizes, f"EP in {{{', '.join(map(str, sizes))}}}: divides the {moe.experts} experts and the {group} ranks"
    )


def zero_stage(m: ModelShape, c: Cluster, t: Training, p: Plan) -> Choice:
    """The lowest ZeRO stage (no offload) at which plan p's memory fits, everything else unchanged."""
    budget = budget_bytes(c, t)
    for z in zero_stages(p.pp, p.dp * p.cp).value:
        q = dataclasses.replace(p, zero=z, offload="none", dp_replicate=p.dp_replicate if z else 1)
        need = memory_per_gpu(m, c, t, q).device_bytes
        if need <= budget:
            name = "DDP" if z == 0 else f"ZeRO-{z}"
            return Choice(z, f"{name} is the lowest stage that fits ({need / 1e9:.1f} of {budget / 1e9:.1f} GB)")
    return Choice(None, "no ZeRO stage fits without CPU offload")


def expert_parallel(m: ModelShape, c: Cluster, t: Training, p: Plan, *, experts: int, top_k: int = 2) -> Choice:
    """EP for a mixture-of-experts version of m (every MLP replaced by `experts` copies, `top_k` per token),
    run with dense plan p: the smallest EP that divides the experts and the data-parallel size at which each
    GPU's extra experts fit beside p's memory. Each expert's weights, gradients and optimizer state are
    sharded by p's ZeRO stage over the dp / EP ranks that hold it (distlab.sharding.zero)."""
    from distlab.sharding.zero import model_state_bytes_per_gpu

    if experts < 1 or top_k < 1 or top_k > experts:
        raise ValueError(f"experts must be >= top_k >= 1, got {experts} experts, top-{top_k}")
    mlp = (3 if m.mlp == "swiglu" else 2) * m.hidden * m.ffn  # one expert of one layer
    base = memory_per_gpu(m, c, t, p).device_bytes
    budget = budget_bytes(c, t)
    for ep in (e for e in range(1, experts + 1) if experts % e == 0 and p.dp % e == 0):
        extra_params = (m.layers // p.pp) * mlp * (experts // ep - 1) // p.tp  # beyond the dense MLP, this GPU
        replicas = p.dp * p.cp // ep
        extra = 0.0
        if extra_params:
            states = model_state_bytes_per_gpu(
                extra_params, replicas, p.zero if replicas > 1 else 0, precision=t.precision
            )
            extra = states["params_bytes"] + states["grads_bytes"] + states["optimizer_bytes"]
        if base + extra <= budget:
            where = "inside the NVLink domain" if p.tp * ep <= c.domain else "across NVLink domains"
            return Choice(
                ep,
                f"EP {ep}: {experts // ep} experts per GPU, {(base + extra) / 1e9:.1f} of "
                f"{budget / 1e9:.1f} GB; top-{top_k} all-to-alls {where}",
            )
    return Choice(None, f"the {experts} experts fit at no EP that divides DP {p.dp}")


def decisions(m: ModelShape, c: Cluster, t: Training, p: Plan, min_headroom: float = MIN_HEADROOM) -> dict[str, Choice]:
    """Every rule's verdict for the request, at plan p's TP and CP: what `distlab plan` searched and why."""
    return {
        "tensor": tensor_sizes(m, c),
        "context": context_sizes(m, c, t, p.tp),
        "pipeline": pipeline_sizes(m, c, t, p.tp, p.cp, min_headroom=min_headroom),
        "zero": zero_stage(m, c, t, p),
    }


# ---------------------------------------------------------------- closed forms the page quotes
def tp_overhead_closed_form(tp: int, hidden: int, flops: float, link_bytes_per_s: float) -> float:
    """TP all-reduce time over layer compute for a 12h^2-parameter layer: four all-reduces of sbh x 2
    bytes at 2(t-1)/t each, against 6 x 12h^2 x sb / t FLOPs: 2(t-1)F / (9 h B)."""
    return 2 * (tp - 1) * flops / (9 * hidden * link_bytes_per_s)


def zero3_hidden_tokens(flops: float, link_bytes_per_s: float) -> float:
    """ZeRO-3 sends 3 x 2 bytes per (local) parameter per step and computes 6 FLOPs per parameter per
    token: its traffic fits under compute when each replica processes more than F / B tokens per step."""
    return flops / link_bytes_per_s
