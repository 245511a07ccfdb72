"""The planner on four requests (7B and 13B fine-tunes on 8 H100s, 70B on 64, 175B on 1024): plans, the
winner's breakdown and why it won (experiment planner), from distlab.planner.search.
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.models.shapes import ModelShape
from distlab.planner.config import Cluster, Plan, Training, cluster, model
from distlab.planner.cost import memory, step
from distlab.planner.rules import LONG_SEQ
from distlab.planner.search import (
    MAX_MICRO_BATCH,
    PRETRAIN_BATCH_TOKENS,
    RESIMULATE,
    Estimate,
    explain,
    finetune_batch_sequences,
    search,
)

# ---------------------------------------------------------------- the chapter's experiment
EXAMPLES = (("7B", "finetune", 1), ("13B", "finetune", 1), ("70B", "pretrain", 8), ("175B", "pretrain", 128))


@experiment(
    "planner",
    "the planner on four requests (7B and 13B fine-tunes on 8 H100s, 70B on 64, 175B on 1024): "
    "best plans, memory, step time, MFU, and why",
    kind="computed",
)
def planner(device: str) -> Result:
    from distlab.planner.cost import (
        GEMM_FRACTION_OF_MAMF,
        MEMORY_EFFICIENCY,
        attention_efficiency,
        gemm_efficiency,
        nvlink_efficiency,
    )

    r = Result("planner", kind="computed")
    r.add("gemm_fraction", GEMM_FRACTION_OF_MAMF, "", "assumed: GEMMs' share of the best measured matmul")
    for chip in ("A100-SXM-80GB", "H100-SXM"):
        g = cluster(chip).gpu
        key = chip[:4].lower()
        r.add(f"gemm_{key}", gemm_efficiency(g), "fraction", f"{chip}: GEMMs' share of the dense peak")
        r.add(
            f"attention_{key}",
            attention_efficiency(g, gemm_efficiency(g)),
            "fraction",
            f"{chip}: FlashAttention's share of the dense peak",
        )
    r.add("memory_efficiency", MEMORY_EFFICIENCY, "fraction", "assumed: memory-bound kernels' share of HBM bandwidth")
    r.add("nvlink_efficiency", nvlink_efficiency(), "fraction", "NCCL's effective NVLink bandwidth over line rate")
    from distlab.planner.config import USABLE_FRACTION

    r.add("usable_fraction", USABLE_FRACTION, "fraction", "share of HBM (and of host memory) a plan may fill")
    r.add("cp_min_seq", LONG_SEQ, "tokens", "context parallelism is considered from this length")
    r.add("max_micro_batch", MAX_MICRO_BATCH, "sequences", "largest micro-batch searched")
    r.add("resimulate", RESIMULATE, "plans", "plans re-timed with the op-by-op pipeline simulator")
    rows = []
    for name, task, nodes in EXAMPLES:
        m, c = model(name), cluster("H100-SXM", nodes=nodes)
        t = Training(
            global_batch_tokens=(PRETRAIN_BATCH_TOKENS if task == "pretrain" else finetune_batch_sequences() * m.seq),
            seq=m.seq,
            task=task,
        )
        ranked = search(m, c, t)
        best = ranked[0]
        key = name.lower()
        rows.append(
            [
                f"{name} {task}",
                f"{nodes} x 8",
                len(ranked),
                best.plan.label(),
                Quantity(best.memory_bytes, "B"),
                Quantity(best.step_seconds, "s"),
                f"{best.time['mfu']:.1%}",
                f"{best.time['tokens_per_second']:,.0f}",
            ]
        )
        r.add(f"{key}_plans", len(ranked), "", f"{name}: plans that fit")
        r.add(f"{key}_mfu", best.time["mfu"], "fraction", f"{name}: the best plan's MFU")
        r.add(f"{key}_step", best.step_seconds, "s", f"{name}: the best plan's step")
        r.add(f"{key}_memory", best.memory_bytes, "B", f"{name}: the best plan's memory per GPU")
        if name == "70B":
            _seventy(r, m, c, t, ranked)
            free = search(m, c, t, rules=("cp-long-only",))[0]  # TP across nodes and pipelines everywhere allowed
            r.add("rules_tp", free.plan.tp, "", "70B: the best plan's TP with chapter 7's TP and PP rules lifted")
            r.claim(
                "70B on 64 GPUs: lifting the TP and PP rules finds the same best plan",
                free.step_seconds,
                best.step_seconds,
                rel_tol=1e-12,
                unit="s",
                formula="distlab.planner.rules drop no best plan",
            )
            r.data["rules_label"] = free.plan.label()
    r.table(
        "examples",
        ["request", "H100 nodes x GPUs", "plans that fit", "best plan", "memory per GPU", "step", "MFU", "tokens/s"],
        rows,
        caption="Mixed-precision AdamW, FlashAttention; fine-tunes at 64 "
        f"sequences per step, pretraining at {PRETRAIN_BATCH_TOKENS / 2**20:g}M tokens",
    )
    _consistency(r)
    return r


def _seventy(r: Result, m: ModelShape, c: Cluster, t: Training, ranked: list[Estimate]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    top = ranked[:6]
    r.table(
        "seventy",
        ["#", "plan", "memory per GPU", "step", "MFU"],
        [
            [i, e.plan.label(), Quantity(e.memory_bytes, "B"), Quantity(e.step_seconds, "s"), f"{e.time['mfu']:.1%}"]
            for i, e in enumerate(top, 1)
        ],
        caption="Llama 2 70B pretraining on 8 nodes of 8 H100s: the six best",
    )
    r.table(
        "why",
        ["why the first plan"],
        [[line] for line in explain(m, c, t, ranked)],
        caption="distlab plan --model 70B --nodes 8, its explanation",
    )
    r.add("seventy_tp", top[0].plan.tp, "", "70B: the best plan's TP")
    r.add("seventy_zero", top[0].plan.zero, "", "70B: the best plan's ZeRO stage")
    r.claim(
        "70B on 64 GPUs: the best plan keeps tensor parallelism inside a node",
        top[0].plan.tp,
        c.gpus_per_node,
        relation="<=",
        formula="chapter 7's rule, not imposed by the ranking",
    )
    groups = {
        "matmul": ("matmul",),
        "memory-bound": ("memory-bound",),
        "tensor-parallel": ("tensor-parallel",),
        "recompute": ("recompute",),
        "bubble": ("bubble",),
        "data-parallel": ("data-parallel",),
        "optimizer and offload": ("optimizer", "offload"),
    }
    fig, ax = plt.subplots(figsize=(10, 3.6))
    left = [0.0] * len(top)
    for label, keys in groups.items():
        vals = [sum(v for k, v in e.time["parts"].items() if any(x in k for x in keys)) for e in top]
        ax.barh(range(len(top)), vals, left=left, label=label)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(top)), [f"{i}. {e.plan.label()}" for i, e in enumerate(top, 1)], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="seconds per step", title="70B on 64 H100s: where each plan's step goes")
    ax.legend(fontsize=7, ncol=4, loc="lower right")
    fig.tight_layout()
    r.figure("seventy", fig, "Step time by cause for the six best plans (distlab.planner.cost)")


def _consistency(r: Result) -> None:
    """The planner's numbers are the other chapters' numbers."""
    from distlab.gpu.flops import flops_per_token, mfu
    from distlab.planner.cost import data_parallel_exposed, effective
    from distlab.sharding.zero import model_state_bytes_per_gpu, traffic_bytes_per_gpu

    m, c = model("7B"), cluster("H100-SXM")
    t = Training(global_batch_tokens=64 * 4096, seq=4096, task="finetune")
    for zero in (0, 3):
        p = Plan(dp=8, zero=zero, microbatches=8)
        mem = memory(m, c, t, p)
        r.claim(
            f"7B on 8 GPUs, ZeRO-{zero}: model state = chapter 6's",
            mem["weights"] + mem["gradients"] + mem["optimizer"],
            model_state_bytes_per_gpu(m.params(), 8, zero)["total_bytes"],
            unit="B",
        )
    p = Plan(dp=8, zero=3, microbatches=1)
    lk = effective(c.intra)
    ring = traffic_bytes_per_gpu(m.params(), 8, 3)["total_bytes"] / lk.bandwidth_bytes_per_s + 3 * 7 * lk.alpha_s
    r.claim(
        "7B, ZeRO-3 on 8 GPUs: collective time = chapter 6's bytes per rank / link + latency",
        data_parallel_exposed(m, c, t, p, 1.0, 1.0)["total"],
        ring,
        rel_tol=1e-9,
        unit="s",
        formula="3 (N-1) ⌈Ψ/N⌉ 2 B / B_eff + 3 (N-1) α",
    )
    _long_context(r, m)
    e = step(m, c, t, Plan(dp=8, zero=3, microbatches=8))
    r.claim(
        "MFU = chapter 2's mfu(tokens/s, 6N + 12Lhs, GPUs, peak)",
        e["mfu"],
        mfu(e["tokens_per_second"], flops_per_token(m.params(), m.layers, m.hidden, 4096), 8, c.gpu.peak_flops("bf16")),
        rel_tol=1e-12,
    )


def _long_context(r: Result, m: ModelShape) -> None:
    """7B at 131,072-token sequences on 32 H100s (the layout `distlab plan --seq 131072 --nodes 4` picks): the
    published MFU convention counts the masked half of attention that FlashAttention never computes."""
    from distlab.planner.cost import gemm_efficiency

    c = cluster("H100-SXM", nodes=4)
    t = Training(global_batch_tokens=32 * 131072, seq=131072)
    e = step(m, c, t, Plan(dp=2, tp=4, cp=4, zero=2, microbatches=16))
    r.add("long_seq", t.seq, "", "the long-context example's sequence length, tokens")
    r.add("long_mfu", e["mfu"], "fraction", "7B, 131k-token sequences on 32 H100s: MFU by 6N + 12Lhs")
    r.add("long_mfu_causal", e["mfu_causal"], "fraction", "the same plan counting causal attention as half")
    r.claim(
        "131k-token 7B plan: MFU counting causal attention as half <= the matmuls' share of the peak",
        e["mfu_causal"],
        gemm_efficiency(c.gpu),
        relation="<=",
        unit="fraction",
        formula="(6N + 6Lhs) tokens / (step x GPUs x peak) <= GEMM efficiency",
    )
