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
        if "tp" in run:  # a Megatron-Core layout: priced below
            continue
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
    _nemotron(r)
    _llama3(r)
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


def _nemotron(r: Result) -> None:
    """NVIDIA's Nemotron-4 340B benchmark on 128 H100s: it ran, so it must fit with its own optimizer (Apex's
    DistributedFusedAdam at dtype bf16); priced with an fp32 state it would not, which is why it was refused."""
    from distlab.models.shapes import ModelShape

    run = entries("memory_runs")["nemotron4-340b-h100-128"]
    shape = {k: run[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")}
    m = ModelShape(name="Nemotron-4 340B", mlp="gelu", dropout=False, seq=run["seq"], **shape)
    c = cluster(run["gpu"], nodes=run["gpus"] // 8)
    p = Plan(
        tp=run["tp"],
        pp=run["pp"],
        dp=run["dp"],
        zero=1,
        micro_batch=run["micro_batch"],
        microbatches=run["global_batch"] // (run["dp"] * run["micro_batch"]),
        recompute=run["recompute"],
        schedule="interleaved",
        virtual=run["virtual"],
    )
    capacity = device_capacity_bytes(c.gpu)
    for state, precision in (("bf16", "mixed-bf16-state"), ("fp32", "mixed")):
        t = Training(
            global_batch_tokens=run["global_batch"] * run["seq"],
            seq=run["seq"],
            framework="megatron-core",
            precision=precision,
        )
        mem = memory_per_gpu(m, c, t, p)
        need = mem.reserved_bytes + mem.outside_allocator_bytes
        r.add(f"nemotron_{state}_need_bytes", need, "B", f"Nemotron-4 340B on 128 H100s, {state} optimizer state")
        r.claim(
            f"Nemotron-4 340B's published layout with a {state} optimizer state "
            + ("fits, as it ran" if state == "bf16" else "would not fit"),
            need,
            capacity,
            relation="<=" if state == "bf16" else ">=",
            unit="B",
            formula="NVIDIA/dgxc-benchmarking nemotron4-340b-synth.yaml",
        )
    r.add("nemotron_capacity_bytes", capacity, "B", "an H100's capacity as reported")


def _llama3(r: Result) -> None:
    """Llama 3 405B at TP 8 / PP 16 / DP 128 on 8K tokens without recomputation, as the paper says it trained. The
    planner refuses it; shown with what the paper prints and does not: its first stage holds one layer fewer (the
    embedding takes its place), and whether the MLP's kernel saves the SiLU output is not printed."""
    from distlab.planner.memory import in_flight
    from distlab.planner.stages import stage_layers

    run = entries("memory_runs")["llama3-405b-h100-16k"]
    m = catalog()[run["model"]]
    c = cluster(run["gpu"], nodes=run["gpus"] // 8)
    microbatches = run["global_batch"] // (run["dp"] * run["micro_batch"])
    t = Training(global_batch_tokens=run["global_batch"] * run["seq"], seq=run["seq"])
    # the paper's FSDP shards optimizer states and gradients but keeps the weights after forward: ZeRO-2
    p = Plan(tp=run["tp"], pp=run["pp"], dp=run["dp"], zero=2, micro_batch=1, microbatches=microbatches)
    mem = memory_per_gpu(m, c, t, p)
    capacity = device_capacity_bytes(c.gpu)
    need = mem.reserved_bytes + mem.outside_allocator_bytes
    per_layer = activation_bytes(m, t, p)
    layers0 = stage_layers(m, p.pp)[0]
    r.claim(
        "Llama 3 405B, 1F1B with 16 micro-batches on 16 stages: the first stage holds min(p, m) = 16 of them",
        in_flight(p, 0),
        min(run["pp"], microbatches),
    )
    r.claim(
        "Llama 3 405B: the first stage's activations are its layers x 16 micro-batches x one layer's",
        mem.activations,
        layers0 * min(run["pp"], microbatches) * per_layer,
        rel_tol=1e-12,
        unit="B",
    )
    # the paper's balancing: the first stage trades one layer for the embedding; the second stage (all its layers,
    # one micro-batch fewer in flight) is then the most loaded
    balanced = per_layer * max((layers0 - 1) * p.pp, layers0 * (p.pp - 1))
    silu = 2.0 * run["seq"] * m.ffn / p.tp  # the SiLU output a fused SwiGLU kernel recomputes instead of saving
    fused = (per_layer - silu) * max((layers0 - 1) * p.pp, layers0 * (p.pp - 1))
    rows = []
    for label, acts in (
        ("as priced: 8 layers on the first stage, eager SwiGLU", mem.activations),
        ("the paper's balancing: 7 layers and the embedding on the first stage", balanced),
        ("and a fused SwiGLU that does not save the SiLU output (not printed)", fused),
    ):
        total = need - mem.activations + acts
        rows.append([label, f"{acts / 1e9:.1f}", f"{total / 1e9:.1f}", f"{capacity / 1e9:.1f}"])
    r.claim(
        "Llama 3 405B: with the paper's stage balancing alone it still needs more than an H100 reports",
        need - mem.activations + balanced,
        capacity,
        relation=">=",
        unit="B",
    )
    r.claim(
        "Llama 3 405B: with a fused SwiGLU as well it fits, as the paper says it ran",
        need - mem.activations + fused,
        capacity,
        relation="<=",
        unit="B",
    )
    r.add("llama3_need_bytes", need, "B", "Llama 3 405B as published, priced: reserved + outside the allocator")
    r.add("llama3_activation_bytes", mem.activations, "B", "its first stage's activations")
    r.add("llama3_balanced_need_bytes", need - mem.activations + balanced, "B", "with the paper's stage balancing")
    r.add("llama3_fused_need_bytes", need - mem.activations + fused, "B", "and a fused SwiGLU")
    r.add("llama3_microbatches", microbatches, "micro-batches", "per step and pipeline: batch size/DP 16")
    r.table(
        "llama3",
        [
            "Llama 3 405B, TP 8 / PP 16 / DP 128, 8K tokens, no recomputation",
            "activations GB",
            "needs GB",
            "capacity GB",
        ],
        rows,
        caption="Computed by distlab.planner.memory (first row) and from its per-layer count (the others)",
    )
