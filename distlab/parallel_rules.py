"""Chapter 7's decision rules for 3D (4D, 5D) parallelism, as the code the planner runs.

Each rule is a small function of the request (model shape, cluster, training settings: distlab.plan_config)
that returns a `Choice`: what it allows or picks, and one line saying why. The planner (distlab.planner)
enumerates its plans through them, so every `distlab plan` call applies them; memory and time come from
the planner's single cost model (distlab.plan_cost), never from a model of their own.

    tensor_sizes     TP inside the NVLink domain, in powers of two that divide the heads, the KV heads and
                     the FFN width (Narayanan et al. 2021, takeaway 1: its all-reduces are on every layer's
                     critical path, 2(t-1)F/(9hB) of its compute)
    context_sizes    CP only for long sequences (from LONG_SEQ tokens), in sizes that split the sequence
                     into 2c zigzag chunks
    pipeline_sizes   PP only when it is needed: when a pipeline-free plan at this TP and CP, with ZeRO-1
                     and no recomputation, does not fit (takeaway 2: PP across nodes for larger models);
                     otherwise a pipeline only adds its bubble
    zero_stages      ZeRO-0/1 with a pipeline (stages 2 and 3 would re-gather every micro-batch), 0-3 without
    zero_stage       which ZeRO stage a plan needs: the lowest whose model states and activations fit
    expert_parallel  for mixture-of-experts layers: the smallest EP, over data-parallel ranks, at which the
                     experts' states fit beside the dense plan; inside a node if it can be

Two rules prune: TP within a node and PP only when needed (CP from LONG_SEQ is the planner's long-standing
cut). `tests/test_parallel_rules.py` checks that the pruned search finds the same best plan as the
exhaustive one (`planner.search(..., rules="none")`) on the chapter's requests.

The experiment `parallel-rules` runs the planner, with these rules, on 7B-175B models and four clusters,
a long-sequence request and a mixture-of-experts request, and prints each rule's verdict beside the plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from distlab.experiments import experiment
from distlab.facts import value
from distlab.model_shapes import ModelShape, preset
from distlab.plan_config import Cluster, Plan, Training, cluster
from distlab.plan_cost import device_bytes, memory
from distlab.results import Quantity, Result

LONG_SEQ = 16384  # context parallelism is considered from this sequence length on


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
    """HBM a plan may fill: the usable fraction of one GPU's memory."""
    return c.gpu.hbm_bytes * t.usable_fraction


# ---------------------------------------------------------------- the rules
def tensor_sizes(m: ModelShape, c: Cluster, *, within_node: bool = True) -> Choice:
    """TP sizes allowed: powers of two up to the NVLink domain (the whole cluster if not within_node) that
    divide the query heads, the KV heads, the FFN width and the GPU count."""
    limit = c.gpus_per_node if within_node else c.gpus
    sizes = [tp for tp in powers_of_two(limit) if not (m.heads % tp or m.kv % tp or m.ffn % tp or c.gpus % tp)]
    where = f"inside the {c.gpus_per_node}-GPU NVLink domain" if within_node else "anywhere"
    return Choice(sizes, f"TP in {{{', '.join(map(str, sizes))}}}: powers of two {where} that divide the "
                         f"{m.heads} heads, {m.kv} KV heads and FFN width {m.ffn}")


def context_sizes(m: ModelShape, c: Cluster, t: Training, tp: int, *, long_only: bool = True) -> Choice:
    """CP sizes allowed at tensor-parallel size tp: 1, and, for sequences of LONG_SEQ tokens or more (any
    length if not long_only), powers of two up to the GPUs left that split the sequence into 2c chunks."""
    if long_only and t.seq < LONG_SEQ:
        return Choice([1], f"no CP: {t.seq:,}-token sequences are shorter than {LONG_SEQ:,}")
    sizes = [cp for cp in powers_of_two(c.gpus // tp) if cp == 1 or t.seq % (2 * cp) == 0]
    return Choice(sizes, f"CP up to {sizes[-1]}: {t.seq:,}-token sequences, split into 2c zigzag chunks")


def fits_without_pipeline(m: ModelShape, c: Cluster, t: Training, tp: int, cp: int) -> tuple[bool, float]:
    """Does a pipeline-free plan at this TP and CP fit with ZeRO-1 (DDP when there is nothing to shard over),
    one sequence per micro-batch and no recomputation? Returns (fits, bytes per GPU)."""
    dp = c.gpus // (tp * cp)
    plan = Plan(tp=tp, pp=1, dp=dp, cp=cp, zero=1 if dp * cp > 1 else 0, micro_batch=1, microbatches=1)
    need = device_bytes(memory(m, c, t, plan))
    return need <= budget_bytes(c, t), need


def pipeline_sizes(m: ModelShape, c: Cluster, t: Training, tp: int, cp: int, *, only_when_needed: bool = True
                   ) -> Choice:
    """PP sizes allowed at this TP and CP: the divisors of the layer count that tile the GPUs, or only 1
    when a pipeline-free ZeRO-1 plan without recomputation already fits (a pipeline would only add its
    bubble: it does not shrink the first stage's activations, and ZeRO-1 already shards the optimizer)."""
    sizes = [pp for pp in range(1, m.layers + 1) if m.layers % pp == 0 and c.gpus % (tp * cp * pp) == 0]
    if only_when_needed:
        fits, need = fits_without_pipeline(m, c, t, tp, cp)
        if fits:
            return Choice([1], f"no PP: at TP {tp} ZeRO-1 fits without one ({need / 1e9:.1f} of "
                               f"{budget_bytes(c, t) / 1e9:.0f} GB)")
        return Choice(sizes, f"PP allowed: at TP {tp} ZeRO-1 without one needs {need / 1e9:.0f} GB of "
                             f"{budget_bytes(c, t) / 1e9:.0f}")
    return Choice(sizes, f"PP in any of the {len(sizes)} divisors of {m.layers} layers that tile the GPUs")


def zero_stages(pp: int, group: int) -> Choice:
    """ZeRO stages to try: 0-1 with a pipeline (2 and 3 would re-gather what every micro-batch needs), 0-3
    without; only 0 (and offload's stages) when the data-parallel group is one GPU."""
    stages = (0, 1) if pp > 1 else (0, 1, 2, 3)
    why = "with a pipeline only ZeRO-0/1" if pp > 1 else "ZeRO-0 to 3"
    if group == 1:
        why += "; one GPU per group: sharding only with CPU offload"
    return Choice(stages, why)


def zero_stage(m: ModelShape, c: Cluster, t: Training, p: Plan) -> Choice:
    """The lowest ZeRO stage (no offload) at which plan p's memory fits, everything else unchanged."""
    budget = budget_bytes(c, t)
    for z in zero_stages(p.pp, p.dp * p.cp).value:
        need = device_bytes(memory(m, c, t, dataclasses.replace(p, zero=z, offload="none")))
        if need <= budget:
            name = "DDP" if z == 0 else f"ZeRO-{z}"
            return Choice(z, f"{name} is the lowest stage that fits ({need / 1e9:.1f} of {budget / 1e9:.0f} GB)")
    return Choice(None, "no ZeRO stage fits without CPU offload")


def expert_parallel(m: ModelShape, c: Cluster, t: Training, p: Plan, *, experts: int, top_k: int = 2) -> Choice:
    """EP for a mixture-of-experts version of m (every MLP replaced by `experts` copies, `top_k` per token),
    run with dense plan p: the smallest EP that divides the experts and the data-parallel size at which each
    GPU's extra experts fit beside p's memory. Each expert's weights, gradients and optimizer state are
    sharded by p's ZeRO stage over the dp / EP ranks that hold it (distlab.zero_memory)."""
    from distlab.zero_memory import model_state_bytes_per_gpu

    if experts < 1 or top_k < 1 or top_k > experts:
        raise ValueError(f"experts must be >= top_k >= 1, got {experts} experts, top-{top_k}")
    mlp = (3 if m.mlp == "swiglu" else 2) * m.hidden * m.ffn  # one expert of one layer
    base = device_bytes(memory(m, c, t, p))
    budget = budget_bytes(c, t)
    for ep in (e for e in range(1, experts + 1) if experts % e == 0 and p.dp % e == 0):
        extra_params = (m.layers // p.pp) * mlp * (experts // ep - 1) // p.tp  # beyond the dense MLP, this GPU
        replicas = p.dp * p.cp // ep
        extra = 0.0
        if extra_params:
            states = model_state_bytes_per_gpu(extra_params, replicas, p.zero if replicas > 1 else 0,
                                               precision=t.precision)
            extra = states["params_bytes"] + states["grads_bytes"] + states["optimizer_bytes"]
        if base + extra <= budget:
            where = "inside a node" if p.tp * ep <= c.gpus_per_node else "across nodes"
            return Choice(ep, f"EP {ep}: {experts // ep} experts per GPU, {(base + extra) / 1e9:.1f} of "
                              f"{budget / 1e9:.0f} GB; top-{top_k} all-to-alls {where}")
    return Choice(None, f"the {experts} experts fit at no EP that divides DP {p.dp}")


def decisions(m: ModelShape, c: Cluster, t: Training, p: Plan) -> dict[str, Choice]:
    """Every rule's verdict for the request, at plan p's TP and CP: what `distlab plan` searched and why."""
    return {"tensor": tensor_sizes(m, c), "context": context_sizes(m, c, t, p.tp),
            "pipeline": pipeline_sizes(m, c, t, p.tp, p.cp), "zero": zero_stage(m, c, t, p)}


# ---------------------------------------------------------------- closed forms the page quotes
def tp_overhead_closed_form(tp: int, hidden: int, flops: float, link_bytes_per_s: float) -> float:
    """TP all-reduce time over layer compute for a 12h^2-parameter layer: four all-reduces of sbh x 2
    bytes at 2(t-1)/t each, against 6 x 12h^2 x sb / t FLOPs: 2(t-1)F / (9 h B)."""
    return 2 * (tp - 1) * flops / (9 * hidden * link_bytes_per_s)


def zero3_hidden_tokens(flops: float, link_bytes_per_s: float) -> float:
    """ZeRO-3 sends 3 x 2 bytes per (local) parameter per step and computes 6 FLOPs per parameter per
    token: its traffic fits under compute when each replica processes more than F / B tokens per step."""
    return flops / link_bytes_per_s


# ---------------------------------------------------------------- the experiment
MODELS = ("7B", "13B", "70B", "175B")
LONG_EXAMPLE = 131072  # tokens per sequence in the long-context request
MOE = {"model": "7B", "experts": 8, "top_k": 2}  # a Mixtral-like request: 8 experts per MLP, top-2


def clusters() -> dict[str, Cluster]:
    return {"1 node, 8 H100, NVLink": cluster("H100-SXM", nodes=1),
            "8 nodes, 64 H100, NVLink + IB NDR": cluster("H100-SXM", nodes=8),
            "128 nodes, 1024 H100, NVLink + IB NDR": cluster("H100-SXM", nodes=128),
            "8 nodes, 64 A100, PCIe 4 + 100 GbE": cluster("A100-SXM-80GB", nodes=8, intra="PCIe4-x16",
                                                          inter="Ethernet-100G")}


def pretraining(m: ModelShape, seq: int | None = None) -> Training:
    from distlab.planner import PRETRAIN_BATCH_TOKENS

    return Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=seq or m.seq)


def _batch_tokens() -> int:
    return pretraining(preset("7B")).global_batch_tokens


def _short(d: dict[str, Choice]) -> str:
    """The verdicts that shaped the plan, as a table cell."""
    extra = [d["context"].reason] if d["context"].value != [1] else []
    return "; ".join([d["pipeline"].reason, d["zero"].reason, *extra])


@experiment("parallel-rules", "3D parallelism decision rules, run by the planner: the plan for 7B, 13B, 70B and "
            "175B on typical clusters, a long-sequence (CP) and a mixture-of-experts (EP) request", kind="computed")
def parallel_rules(device: str) -> Result:
    from distlab.planner import NothingFits, search

    r = Result("parallel-rules", kind="computed")
    rows = []
    for name in MODELS:
        m = preset(name)
        t = pretraining(m)
        for label, c in clusters().items():
            try:
                best = search(m, c, t)[0]
            except NothingFits as e:
                rows.append([name, label, "does not fit", "—", "—", str(e).split(";")[0]])
                continue
            p = best.plan
            d = decisions(m, c, t, p)
            r.claim(f"{name} on {label}: TP inside one node", p.tp, c.gpus_per_node, relation="<=")
            if d["pipeline"].value == [1]:
                r.claim(f"{name} on {label}: no pipeline where the rule says none is needed", p.pp, 1)
            rows.append([name, label, p.label(), Quantity(best.memory_bytes, "B"), Quantity(best.step_seconds, "s"),
                         _short(d)])
            r.data[f"{name} / {label}"] = best.to_dict()
    _long(r, rows)
    _moe(r, rows)
    r.table("plans", ["model", "cluster", "best plan", "memory per GPU", "step", "the rules' verdicts"], rows,
            caption=f"distlab plan with the rules: pretraining at {_batch_tokens() / 2**20:g}M tokens per step, "
                    "each model's training sequence, mixed-precision AdamW, FlashAttention")
    _rules_table(r)
    _closed_forms(r)
    return r


def _long(r: Result, rows: list) -> None:
    from distlab.planner import NothingFits, search

    label = "8 nodes, 64 H100, NVLink + IB NDR"
    c, m = clusters()[label], preset("70B")
    t = pretraining(m, LONG_EXAMPLE)
    best = search(m, c, t)[0]
    p = best.plan
    r.claim(f"70B at {LONG_EXAMPLE} tokens on {label}: the best plan uses context parallelism", p.cp, 2,
            relation=">=")
    try:
        no_cp = search(m, c, t, where=lambda q: q.cp == 1)[0]
        r.add("long_no_cp_slowdown", no_cp.step_seconds / best.step_seconds - 1, "fraction",
              "70B at the long sequence: how much slower the best plan without CP is")
        r.data["long_no_cp_label"] = no_cp.plan.label()
    except NothingFits:
        r.data["long_no_cp_label"] = "nothing fits"
    rows.append([f"70B, {LONG_EXAMPLE:,}-token sequences", label, p.label(), Quantity(best.memory_bytes, "B"),
                 Quantity(best.step_seconds, "s"), _short(decisions(m, c, t, p))])
    r.add("long_seq", LONG_EXAMPLE, "tokens", "long-context example")
    r.add("long_threshold", LONG_SEQ, "tokens", "context parallelism is considered from this length")
    r.add("long_cp", p.cp, "", "context-parallel size the planner chooses at that length")
    r.add("long_tp", p.tp, "", "tensor-parallel size the planner chooses at that length")


def _moe(r: Result, rows: list) -> None:
    from distlab.planner import search

    label = "8 nodes, 64 H100, NVLink + IB NDR"
    c, m = clusters()[label], preset(MOE["model"])
    t = pretraining(m)
    ranked = search(m, c, t)
    verdicts = (expert_parallel(m, c, t, e.plan, experts=MOE["experts"], top_k=MOE["top_k"]) for e in ranked)
    # the fastest dense plan with room for the experts
    rank, ep = next((i, v) for i, v in enumerate(verdicts, 1) if v.value is not None)
    e = ranked[rank - 1]
    r.claim(f"{MOE['model']} with {MOE['experts']} experts on {label}: EP divides the experts and DP",
            (MOE["experts"] % ep.value) + (e.plan.dp % ep.value), 0)
    rows.append([f"{MOE['model']}, {MOE['experts']} experts, top-{MOE['top_k']}", label,
                 f"{e.plan.label()}, EP {ep.value}", "—", "—",
                 f"dense plan #{rank} of the ranking (step time of the dense model); {ep.reason}"])
    r.add("moe_experts", MOE["experts"], "", "experts per MLP in the MoE example")
    r.add("moe_ep", ep.value, "", "expert-parallel size the rule picks")
    r.add("moe_rank", rank, "", "rank of the first dense plan with room for the experts")


def _rules_table(r: Result) -> None:
    """Every rule's verdict for one request: 70B on 64 H100s, at the best plan's TP and CP."""
    from distlab.planner import search

    c, m = clusters()["8 nodes, 64 H100, NVLink + IB NDR"], preset("70B")
    t = pretraining(m)
    p = search(m, c, t)[0].plan
    d = decisions(m, c, t, p)
    rows = [[rule, str(ch.value), ch.reason] for rule, ch in d.items()]
    for tp in tensor_sizes(m, c).value:
        ch = pipeline_sizes(m, c, t, tp, 1)
        rows.append([f"pipeline at TP {tp}", "1" if ch.value == [1] else f"1 to {ch.value[-1]}", ch.reason])
    r.table("rules", ["rule", "verdict", "why"], rows, caption=f"The rules for 70B on 64 H100s, at the best plan's "
            f"TP {p.tp} and CP {p.cp}")
    r.add("rules_70b_tp", p.tp, "", "70B on 64 H100s: the best plan's TP")
    free = search(m, c, t, rules=("cp-long-only",))[0]
    r.claim("70B on 64 H100s: the TP and PP rules drop no best plan (the search without them finds the same)",
            free.step_seconds, search(m, c, t)[0].step_seconds, rel_tol=1e-12, unit="s")
    exhaustive = search(m, c, t, rules=())[0]  # CP at 4k tokens too
    r.add("cp_cut_cost", search(m, c, t)[0].step_seconds / exhaustive.step_seconds - 1, "fraction",
          "70B on 64 H100s: how much faster the cost model finds CP at 4k tokens than the best plan without it")
    r.data["cp_cut_label"] = exhaustive.plan.label()
    r.add("cp_cut_tp", exhaustive.plan.tp, "", "70B on 64 H100s at 4k tokens, no rules: the best plan's TP")
    r.add("cp_cut_cp", exhaustive.plan.cp, "", "70B on 64 H100s at 4k tokens, no rules: the best plan's CP")


def _closed_forms(r: Result) -> None:
    from distlab.collectives import per_direction_bytes_per_s
    from distlab.plan_cost import effective, gemm_efficiency, layer_work, stage_times

    flops = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    nvlink, ib = per_direction_bytes_per_s("NVLink4-H100"), per_direction_bytes_per_s("InfiniBand-NDR")
    m = preset("70B")
    for t, link, key in ((8, nvlink, "tp8_nvlink"), (16, ib, "tp16_ib"), (2, ib, "tp2_ib")):
        r.add(f"70b_{key}_overhead", tp_overhead_closed_form(t, m.hidden, flops, link), "",
              f"70B: TP all-reduce time over compute, t={t}")
    # the planner's cost model against the closed form: GPT-3's layer is 12h^2 (+13h) parameters
    gpt3, c = preset("175B"), cluster("H100-SXM", nodes=1)
    t = Training(global_batch_tokens=64 * gpt3.seq, seq=gpt3.seq)
    p = Plan(tp=8, micro_batch=64, microbatches=1)  # large messages: NCCL's per-step latency is negligible
    st, w = stage_times(gpt3, c, t, p), layer_work(gpt3, t, p)
    ge = gemm_efficiency(c.gpu)
    ratio = (st["forward tensor-parallel"] + st["backward tensor-parallel"]) / \
        (3 * gpt3.layers * w["matmul_flops"] / (c.gpu.peak_flops("bf16") * ge))
    r.claim("175B, t = 8: the planner's TP all-reduce time over matmul time = 2(t-1)F/(9hB) at the rates it assumes",
            ratio, tp_overhead_closed_form(8, gpt3.hidden, c.gpu.peak_flops("bf16") * ge,
                                           effective(c.intra).bandwidth_bytes_per_s), rel_tol=0.01,
            formula="F and B at the GEMM efficiency and NCCL's NVLink rate; latency adds < 1 %")
    c8 = cluster("H100-SXM", nodes=8)
    t = pretraining(m)
    one = memory(m, c8, t, Plan(tp=8, pp=1, dp=8, zero=1, microbatches=16))["activations"]
    eight = memory(m, c8, t, Plan(tp=8, pp=8, dp=1, microbatches=128))["activations"]
    r.claim("70B, t = 8: 1F1B's first stage holds as many activations with p = 8 as with p = 1", eight, one,
            rel_tol=1e-12, unit="B", formula="L/p layers x p micro-batches in flight")
    r.add("70b_stage0_activations", eight, "B", "70B, t=8, selective: activations on pipeline stage 0, p = 8")
    r.add("zero3_hidden_tokens", zero3_hidden_tokens(flops, ib), "tokens",
          "tokens per data-parallel replica per step above which ZeRO-3 traffic hides (H100, IB NDR)")
    a100 = value("gpus.A100-SXM-80GB.bf16_dense_tflops") * 1e12
    r.add("zero3_hidden_tokens_ethernet", zero3_hidden_tokens(a100, per_direction_bytes_per_s("Ethernet-100G")),
          "tokens", "the same for A100 over 100 GbE")
    r.add("global_batch_tokens", t.global_batch_tokens, "tokens", "global batch assumed")
    r.add("tokens_per_replica_1024", t.global_batch_tokens // 1024, "tokens",
          "tokens per step each of 1024 data-parallel replicas gets")
