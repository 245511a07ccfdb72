"""The planner's fit test against published outcomes: layouts a source reports as running, and one it reports as
running out of memory (distlab/data/memory_runs.toml), each priced by the phase memory model with the source's own
recomputation; and what Megatron-Core's --recompute-modules free, against the saved tensors counted by hand.

A layout that ran must fit (reserved + outside the allocator within the device's reported capacity); the one that ran
out of memory must not. Nothing is fitted per row. Pure Python.
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import entries
from distlab.core.results import Result
from distlab.models.shapes import catalog, preset
from distlab.planner.config import Plan, Training, cluster, device_capacity_bytes
from distlab.planner.memory import activation_bytes, memory_per_gpu

RECOMPUTE = {"none": ("none", ("core_attn",)), "full": ("full", ("core_attn",)), "selective-op": ("selective", ("op",))}


@experiment(
    "memory-outcomes",
    "torchtitan's published FSDP2 runs on 64 A100s (ran, or out of memory) against the planner's fit test, and what "
    "each of Megatron-Core's recompute modules frees",
    kind="computed",
)
def memory_outcomes(device: str) -> Result:
    r = Result("memory-outcomes", kind="computed")
    rows = []
    models = catalog()
    for key, run in entries("memory_runs").items():
        m = models[run["model"]]
        c = cluster(run["gpu"], nodes=run["gpus"] // 8)
        recompute, modules = RECOMPUTE[run["recompute"]]
        t = Training(
            global_batch_tokens=run["gpus"] * run["micro_batch"] * run["seq"],
            seq=run["seq"],
            framework="torchtitan",
            recompute_modules=modules,
        )
        p = Plan(dp=run["gpus"], zero=3, micro_batch=run["micro_batch"], microbatches=1, recompute=recompute)
        mem = memory_per_gpu(m, c, t, p)
        need = mem.reserved_bytes + mem.outside_allocator_bytes
        capacity = device_capacity_bytes(c.gpu)
        ran = run["outcome"] == "ran"
        r.claim(
            f"{run['model']} micro-batch {run['micro_batch']}, {run['recompute']} recompute: {run['outcome']} as "
            "published",
            need,
            capacity,
            relation="<=" if ran else ">=",
            unit="B",
            formula="torchtitan docs/performance.md",
        )
        rows.append(
            [
                m.name,
                run["seq"],
                run["micro_batch"],
                run["recompute"],
                f"{mem.activations / 1e9:.1f}",
                f"{need / 1e9:.1f}",
                f"{capacity / 1e9:.1f}",
                run["outcome"],
            ]
        )
        r.add(f"{key}_need_bytes", need, "B", f"{m.name}, micro-batch {run['micro_batch']}, {run['recompute']}")
    r.table(
        "outcomes",
        ["model", "seq", "micro-batch", "recompute", "activations GB", "planner: needs GB", "capacity GB", "published"],
        rows,
        caption="FSDP2 on 64 A100 80GB (torchtitan, docs/performance.md), priced by distlab.planner.memory",
    )
    # Megatron-Core's --recompute-modules on Llama 2 7B, one sequence of 4096 tokens, no TP
    m, s = preset("7B"), 4096
    sel = Plan(dp=8, microbatches=8, recompute="selective")
    base = Training(global_batch_tokens=64 * s, seq=s)
    none = activation_bytes(m, base, Plan(dp=8, microbatches=8))
    r.add("none_layer_bytes", none, "B", "one layer's activations, no recompute")
    freed = {
        "core_attn": (4 * m.heads * s, "the fp32 log-sum-exp (FlashAttention keeps Q, K, V, O anyway)"),
        "mlp": (4 * 2 * s * m.ffn, "gate, SiLU output, up and their product: 4 x 2sbf"),
        "layernorm": (2 * 2 * s * m.hidden, "the two norms' outputs: 2 x 2sbh"),
    }
    mods = []
    for name, (expected, what) in freed.items():
        t = Training(global_batch_tokens=64 * s, seq=s, recompute_modules=(name,))
        got = none - activation_bytes(m, t, sel)
        r.add(f"freed_{name}_bytes", got, "B", f"what recomputing {name} frees per layer")
        r.claim(f"recomputing {name} frees {what}", got, expected, unit="B")
        mods.append([name, f"{got / 1e6:.1f}", what])
    r.table(
        "modules",
        ["--recompute-modules", "freed per layer MB (Llama 2 7B, s = 4096, b = 1)", "what"],
        mods,
        caption="Computed from distlab.memory.layer_activations' saved tensors",
    )
    return r
