"""The planner on four requests (7B and 13B fine-tunes on 8 H100s, 70B on 64, 175B on 1024): plans, the
winner's breakdown and why it won (experiment planner), from distlab.planner.search; and the done-when request,
70B on 64 H100s with every dimension fixed (TP 8, PP 1, ZeRO-1, micro-batch 1).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.models.shapes import ModelShape
from distlab.planner.config import FRAGMENTATION_FRACTION, Cluster, Plan, Training, cluster, model, usable_bytes
from distlab.planner.cost import memory_per_gpu, step
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

EXAMPLES = (("7B", "finetune", 1), ("13B", "finetune", 1), ("70B", "pretrain", 8), ("175B", "pretrain", 128))
FIXED_70B = {"tp": 8, "pp": 1, "zero": 1, "micro_batch": 1}  # the done-when command's layout


@experiment(
    "planner",
    "the planner on four requests (7B and 13B fine-tunes on 8 H100s, 70B on 64, 175B on 1024): "
    "best plans, memory, step time, MFU with its band, and why",
    kind="computed",
)
def planner(device: str) -> Result:
    from distlab.core.facts import value
    from distlab.hardware.collectives import fitted_bus_bandwidth
    from distlab.planner.calibration import mfu_band
    from distlab.planner.config import device_capacity_bytes
    from distlab.planner.cost import NCCL_CHANNELS
    from distlab.planner.kernels import MEMORY_EFFICIENCY, TILE_M, TILE_N, matmul_fraction

    r = Result("planner", kind="computed")
    for chip in ("A100-SXM-80GB", "H100-SXM"):
        g = cluster(chip).gpu
        key = chip[:4].lower()
        r.add(f"matmul_{key}", matmul_fraction(g), "fraction", f"{chip}: sustained matmul share of the dense peak")
        r.add(f"capacity_{key}", device_capacity_bytes(g), "B", f"{chip}: memory the driver reports")
        r.add(f"usable_{key}", usable_bytes(g), "B", f"{chip}: what a plan may fill")
        r.add(f"nvlink_bus_{key}", fitted_bus_bandwidth(cluster(chip).intra), "B/s", f"{chip}: NVLink bus bandwidth")
    r.add("memory_efficiency", MEMORY_EFFICIENCY, "fraction", "assumed: memory-bound kernels' share of HBM bandwidth")
    r.add("fragmentation", FRAGMENTATION_FRACTION, "fraction", "assumed: the allocator's fragmentation margin")
    r.add("context_mib", value("planner.memory-reserve.cuda_context_mib"), "MiB", "CUDA context")
    r.add("nccl_gb", value("planner.memory-reserve.nccl_per_communicator_gb"), "GB", "NCCL buffers per communicator")
    r.add("nccl_channels", NCCL_CHANNELS, "SMs", "SMs an overlapped collective takes")
    r.add("tile", TILE_M * TILE_N, "", "outputs per GEMM thread-block tile (128 x 256)")
    r.add("cp_min_seq", LONG_SEQ, "tokens", "context parallelism is considered from this length")
    r.add("max_micro_batch", MAX_MICRO_BATCH, "sequences", "largest micro-batch searched")
    r.add("resimulate", RESIMULATE, "plans", "plans re-timed with the pipeline simulator")
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
        lo, hi = mfu_band(best.time.mfu)
        rows.append(
            [
                f"{name} {task}",
                f"{nodes} x 8",
                len(ranked),
                best.plan.label(),
                Quantity(best.memory_bytes, "B"),
                Quantity(best.step_seconds, "s"),
                f"{best.time.mfu:.1%} ({lo:.0%}-{hi:.0%})",
                f"{best.time.tokens_per_second:,.0f}",
            ]
        )
        r.add(f"{key}_plans", len(ranked), "", f"{name}: plans that fit")
        r.add(f"{key}_mfu", best.time.mfu, "fraction", f"{name}: the best plan's MFU by the model")
        r.add(f"{key}_mfu_low", lo, "fraction", f"{name}: the low end of its band")
        r.add(f"{key}_mfu_high", hi, "fraction", f"{name}: the high end of its band")
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
            _fixed(r, m, c, t)
    r.table(
        "examples",
        [
            "request",
            "H100 nodes x GPUs",
            "plans that fit",
            "best plan",
            "memory per GPU",
            "step",
            "MFU (band)",
            "tokens/s",
        ],
        rows,
        caption="Mixed-precision AdamW (16 bytes per parameter of model state), FlashAttention; fine-tunes at 64 "
        f"sequences per step, pretraining at {PRETRAIN_BATCH_TOKENS / 2**20:g}M tokens (computed)",
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
            [i, e.plan.label(), Quantity(e.memory_bytes, "B"), Quantity(e.step_seconds, "s"), f"{e.time.mfu:.1%}"]
            for i, e in enumerate(top, 1)
        ],
        caption="Llama 2 70B pretraining on 8 nodes of 8 H100s: the six best (computed)",
    )
    r.table(
        "why",
        ["why the first plan"],
        [[line] for line in explain(m, c, t, ranked)],
        caption="distlab plan --model 70B --nodes 8, its explanation",
    )
    r.add("seventy_tp", top[0].plan.tp, "", "70B: the best plan's TP")
    r.add("seventy_pp", top[0].plan.pp, "", "70B: the best plan's PP")
    r.add("seventy_zero", top[0].plan.zero, "", "70B: the best plan's ZeRO stage")
    r.claim(
        "70B on 64 GPUs: the best plan keeps tensor parallelism inside a node",
        top[0].plan.tp,
        c.gpus_per_node,
        relation="<=",
        formula="chapter 7's rule, not imposed by the ranking",
    )
    parts = ("compute", "recompute", "exposed_tp", "exposed_dp", "exposed_cp_ep", "bubble", "offload", "optimizer")
    fig, ax = plt.subplots(figsize=(10, 3.6))
    left = [0.0] * len(top)
    for part in parts:
        vals = [getattr(e.time.breakdown, part) for e in top]
        ax.barh(range(len(top)), vals, left=left, label=part.replace("_", " "))
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(top)), [f"{i}. {e.plan.label()}" for i, e in enumerate(top, 1)], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="seconds per step", title="70B on 64 H100s: where each plan's step goes")
    ax.legend(fontsize=7, ncol=4, loc="lower right")
    fig.tight_layout()
    r.figure("seventy", fig, "Step time by cause for the six best plans (distlab.planner.cost, computed)")


def _fixed(r: Result, m: ModelShape, c: Cluster, t: Training) -> None:
    """`distlab plan --model 70B --gpu H100-SXM --nodes 8 --tp 8 --pp 1 --zero 1 --micro-batch 1`: one plan."""
    only = search(m, c, t, fixed=FIXED_70B)
    e = only[0]
    b = e.time.breakdown
    r.add("fixed_plans", len(only), "", "plans with TP 8, PP 1, ZeRO-1, micro-batch 1 fixed")
    r.add("fixed_mfu", e.time.mfu, "fraction", "that plan's MFU by the model")
    r.add("fixed_step", e.step_seconds, "s", "that plan's step")
    r.add("fixed_tp_share", b.exposed_tp / e.step_seconds, "fraction", "its exposed TP share of the step")
    r.data["fixed_label"] = e.plan.label()
    r.claim(
        "70B, TP 8 x ZeRO-1 x micro-batch 1 fixed: the step's causes add up to the step",
        sum(b.as_dict().values()),
        e.step_seconds,
        rel_tol=1e-12,
        unit="s",
    )


def _consistency(r: Result) -> None:
    """The planner's numbers are the other chapters' numbers."""
    from distlab.gpu.flops import flops_per_token, mfu
    from distlab.sharding.zero import model_state_bytes_per_gpu

    m, c = model("7B"), cluster("H100-SXM")
    t = Training(global_batch_tokens=64 * 4096, seq=4096, task="finetune")
    for zero in (0, 3):
        p = Plan(dp=8, zero=zero, microbatches=8)
        mem = memory_per_gpu(m, c, t, p)
        r.claim(
            f"7B on 8 GPUs, ZeRO-{zero}: model state = chapter 6's",
            mem.model_states,
            model_state_bytes_per_gpu(m.params(), 8, zero)["total_bytes"],
            unit="B",
        )
    _long_context(r, m)
    e = step(m, c, t, Plan(dp=8, zero=3, microbatches=8))
    r.claim(
        "MFU = chapter 2's mfu(tokens/s, 6N + 12Lhs, GPUs, peak)",
        e.mfu,
        mfu(e.tokens_per_second, flops_per_token(m.params(), m.layers, m.hidden, 4096), 8, c.gpu.peak_flops("bf16")),
        rel_tol=1e-12,
    )


def _long_context(r: Result, m: ModelShape) -> None:
    """7B at 131,072-token sequences on 32 H100s: the published MFU convention counts the masked half of attention
    that FlashAttention never computes."""
    from distlab.planner.kernels import matmul_fraction

    c = cluster("H100-SXM", nodes=4)
    t = Training(global_batch_tokens=32 * 131072, seq=131072)
    e = step(m, c, t, Plan(dp=2, tp=4, cp=4, zero=2, microbatches=16))
    r.add("long_seq_tokens", t.seq, "", "the long-context example's sequence length, tokens")
    r.add("long_mfu", e.mfu, "fraction", "7B, 131k-token sequences on 32 H100s: MFU by 6N + 12Lhs")
    r.add("long_mfu_causal", e.mfu_causal, "fraction", "the same plan counting causal attention as half")
    r.claim(
        "131k-token 7B plan: MFU counting causal attention as half <= the matmuls' sustained share of the peak",
        e.mfu_causal,
        matmul_fraction(c.gpu),
        relation="<=",
        unit="fraction",
        formula="(6N + 6Lhs) tokens / (step x GPUs x peak) <= sustained matmul share",
    )
