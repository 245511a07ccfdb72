"""The planner's fit test against published outcomes: layouts a source reports as running, and one it reports as
running out of memory (distlab/data/memory_runs.toml), each priced by the phase memory model with the source's own
recomputation; and what Megatron-Core's --recompute-modules free, against the saved tensors counted by hand.

A layout that ran must fit (reserved + outside the allocator within the device's reported capacity); the one that ran
out of memory must not. Nothing is fitted per row. Pure Python.
"""

from __future__ import annotations

import re

from distlab.core.experiments import experiment
from distlab.core.facts import entries, fact
from distlab.core.results import Quantity, Result
from distlab.models.published import claim_checkpoint_count, claim_llama2_context
from distlab.models.shapes import ModelShape, catalog, preset, published_params
from distlab.planner.config import FRAGMENTATION_FRACTION, Plan, Training, cluster, device_capacity_bytes
from distlab.planner.memory import activation_bytes, memory_per_gpu
from distlab.planner.memory_quotes import A100_MIB, nccl_by_hand, quoted

RECOMPUTE = {"none": ("none", ("core_attn",)), "full": ("full", ("core_attn",)), "selective-op": ("selective", ("op",))}
# typed fields the table's need rests on, against the number their source's own sentence prints
EAGER_LOSS = (r"log_softmax saves its fp32 output \(([0-9]+) B\)", r"of the logits \([0-9]+ B\): ([0-9]+) B")


AC = {"none": "no", "full": "full", "selective-op": "selective op"}  # the source's activation-checkpointing column


def published_tokens(key: str) -> float:
    """GPUs x sequence x micro-batch of a torchtitan row as its source's sentences print them (the row's table line,
    or footnote 1 for the layout that ran out of memory), read from the source's detail apart from the typed row."""
    run = entries("memory_runs")[key]
    detail = fact(f"memory_runs.{key}.gpus").source.detail
    gpus = float(re.search(r"on ([0-9]+) A100", detail).group(1))  # type: ignore[union-attr]
    llama2_seq = float(re.search(r"Llama 2 is ([0-9]+) which is halved", detail).group(1))  # type: ignore[union-attr]
    llama3 = run["model"].startswith("Llama-3")
    size = run["model"].removeprefix("Llama-3-")
    if run["outcome"] == "OOM":
        batch = re.search(r"local batch size ([0-9]+) will cause an OOM", detail).group(1)  # type: ignore[union-attr]
    else:
        table = detail.split("Llama 2 '")[0 if llama3 else 1]
        row = re.search(rf"\| {size} \| ([0-9]+)[^|]* \| {AC[run['recompute']]} \|", table)
        batch = row.group(1)  # type: ignore[union-attr]
    return gpus * llama2_seq * (2 if llama3 else 1) * float(batch)


def by_hand(m: ModelShape, params: float, gpus: int, s: int, b: int, recompute: str) -> dict[str, float]:
    """torchtitan's FSDP2 on `gpus` A100s, written out in float64 from the checkpoint's published parameter count,
    the shape and the sources' sentences: an independent reference for the outcomes table (it calls nothing in
    distlab.planner.memory or distlab.memory). Flash attention, SwiGLU, no dropout, one micro-batch per step."""
    h, a, g, f, vocab, layers = m.hidden, m.heads, m.kv, m.ffn, m.vocab, m.layers
    d, sb = h / a, s * b
    # mixed precision sharded over every GPU: bf16 weight and gradient, fp32 master and two moments (K = 12), and
    # foreach AdamW's fp32 sqrt of the second moment during the step
    shard = params / gpus
    weights, grads, opt, temps = 2 * shard, 2 * shard, 12 * shard, 4 * shard
    root_params = 2 * vocab * h + h  # embedding, untied output head, final norm
    layer = 2 * (params - root_params) / layers  # one layer's bf16 weights (or its unsharded bf16 gradient)
    root = 2 * root_params  # the root module stays gathered from forward through backward
    gathered = 2 * layer  # the layer computing and the one prefetched
    at_loss = layer  # torchtitan keeps its last block gathered into backward
    # one layer's saved bytes: no recompute (flash): the norms' and projections' inputs, Q, O (12sbh), K and V at
    # g heads, SwiGLU's four (8sbf), the fp32 log-sum-exp (4abs), the two norms' fp32 1/rms (8sb)
    flash = 12 * sb * h + 4 * sb * d * g + 8 * sb * f + 4 * a * b * s + 8 * sb
    per_layer = {
        "none": flash,
        "full": 2 * sb * h,  # the block's input
        # per-op: the input, the outputs of q, v, gate and down (every other matmul), O and the log-sum-exp
        "selective-op": 2 * sb * h + 2 * sb * (h + d * g + f + h) + 2 * sb * h + 4 * a * b * s,
    }[recompute]
    working = flash - 4 * a * b * s if recompute == "full" else 0.0  # a layer rebuilt with its core checkpointed
    acts = layers * per_layer
    # torchtitan's eager loss: log_softmax's fp32 output after forward; with the gradients at its backward
    fwd_logit = quoted("memory_buffers.loss-eager.forward_bytes_per_logit", EAGER_LOSS[0])
    bwd_logit = quoted("memory_buffers.loss-eager.backward_bytes_per_logit", EAGER_LOSS[1])
    logits = sb * vocab
    # the output projection's saved input (bf16) and the eager final norm's fp32 upcast and bf16 output, outside the
    # checkpointed blocks (torchtitan's model.py and norms.py)
    head_input = (2 + 4 + 2) * sb * h
    held = weights + opt + root
    phases = (
        held + gathered + acts + head_input + fwd_logit * logits,  # forward's end
        held + at_loss + acts + head_input + bwd_logit * logits,  # the loss's backward
        held + gathered + acts + layer + working,  # the last layer's backward: its unsharded gradient
        held + gathered + grads + per_layer + working,  # backward's end: the first layer's activations left
        weights + opt + grads + temps,  # the optimizer step
    )
    capacity = quoted("planner.capacity-A100-SXM-80GB.reported_mib", A100_MIB) * 2**20
    outside = _outside_by_hand(capacity, communicators=1)  # data parallel only
    return {"activations": acts, "need": max(phases) + outside, "capacity": capacity}


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
    counted: set[str] = set()
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
        label = f"{run['model']} b={run['micro_batch']} {run['recompute']}"
        r.claim(
            f"{label}: {run['outcome']} as published",
            need,
            capacity,
            relation="<=" if ran else ">=",
            unit="B",
            formula="torchtitan docs/performance.md",
        )
        r.claim(
            f"{label}: GPUs x seq x batch = the source's",
            run["gpus"] * run["seq"] * run["micro_batch"],
            published_tokens(key),
            unit="tokens",
        )
        if m.name not in counted:
            counted.add(m.name)
            claim_checkpoint_count(r, run["model"])
        hand = by_hand(
            m, published_params(run["model"]) or 0, run["gpus"], run["seq"], run["micro_batch"], run["recompute"]
        )
        row = [m.name, run["seq"], run["micro_batch"], run["recompute"]]
        row += [Quantity(mem.activations, "B"), Quantity(need, "B"), Quantity(capacity, "B"), run["outcome"]]
        for what, q in zip(("activations", "need"), row[4:6]):
            r.claim(f"{label}: {what} = by hand", q.value, hand[what], rel_tol=1e-12, unit="B")
        rows.append(row)
        r.add(f"{key}_need_bytes", need, "B", f"{m.name}, micro-batch {run['micro_batch']}, {run['recompute']}")
    r.add("fragmentation", FRAGMENTATION_FRACTION, "fraction", "assumed: the allocator's fragmentation margin")
    r.claim("A100 80GB capacity = by hand", rows[0][6].value, hand["capacity"], unit="B")
    r.table(
        "outcomes",
        ["model", "seq", "micro-batch", "recompute", "activations", "planner: needs", "capacity", "published"],
        rows,
        caption="FSDP2 on 64 A100 80GB (torchtitan, docs/performance.md), priced by distlab.planner.memory",
    )
    _nemotron(r)
    _llama3(r)
    # Megatron-Core's --recompute-modules on Llama 2 7B, one sequence of its pre-training length, no TP
    m = preset("7B")
    s, h, f, a = m.seq, m.hidden, m.ffn, m.heads
    claim_llama2_context(r, m)
    claim_checkpoint_count(r, "7B")
    sel = Plan(dp=8, microbatches=8, recompute="selective")
    base = Training(global_batch_tokens=64 * s, seq=s)
    none = activation_bytes(m, base, Plan(dp=8, microbatches=8))
    r.add("none_layer_bytes", none, "B", "one layer's activations, no recompute")
    # by hand (b = 1, as many K/V heads as query heads): 12sh + 4sh + 8sf + 4as + 8s
    r.claim("7B layer, no recompute = 16sh + 8sf + 4as + 8s", none, 16 * s * h + 8 * s * f + 4 * a * s + 8 * s)
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
        mods.append([name, Quantity(got, "B"), what])
    r.table(
        "modules",
        ["--recompute-modules", "freed per layer (Llama 2 7B, s = 4096, b = 1)", "what"],
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
    r.claim(
        "Nemotron-4 340B: ZeRO-1, as the benchmark's distributed_fused_adam shards the optimizer state only",
        p.zero,
        1 if "distributed_fused_adam" in fact("memory_runs.nemotron4-340b-h100-128.gpus").source.detail else 0,
    )
    for state, precision in (("bf16", "mixed-bf16-state"), ("fp32", "mixed")):
        t = Training(
            global_batch_tokens=run["global_batch"] * run["seq"],
            seq=run["seq"],
            framework="megatron-core",
            precision=precision,
        )
        mem = memory_per_gpu(m, c, t, p)
        need = mem.reserved_bytes + mem.outside_allocator_bytes
        _beside_allocator(r, f"Nemotron-4 340B, {state} state", need - mem.allocator_peak_bytes, capacity)
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


def _outside_by_hand(capacity: float, communicators: int) -> float:
    """What nvidia-smi sees beyond the allocator's peak, by hand: the fragmentation allowance, the CUDA context and
    NCCL's buffers for each communicator."""
    context = quoted("planner.memory-reserve.cuda_context_mib") * 2**20
    return FRAGMENTATION_FRACTION * capacity + context + communicators * nccl_by_hand()


def _beside_allocator(r: Result, label: str, beside: float, capacity: float) -> None:
    """Claim it for a layout whose TP, PP and DP are all above 1: three communicators."""
    r.claim(
        f"{label}: need - the allocator's peak = fragmentation + CUDA context + 3 communicators' NCCL buffers",
        beside,
        _outside_by_hand(capacity, communicators=3),
        rel_tol=1e-12,
        unit="B",
    )


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
    _beside_allocator(r, "Llama 3 405B", need - mem.allocator_peak_bytes, capacity)
    table4 = re.search(r"'16,384 \| ([^']*)'", fact("memory_runs.llama3-405b-h100-16k.gpus").source.detail)
    assert table4 is not None
    r.claim(
        "Llama 3 405B: micro-batches per step = Table 4's batch size / DP (one sequence each)",
        microbatches,
        int(table4.group(1).split(" | ")[5]),
    )
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
    # by hand: 126 layers on 16 stages leave 8 on the first; balanced, stage 0 holds 7 layers x 16 micro-batches in
    # flight and stage 1 8 x 15: 120 layer-micro-batches at most, not 128; the SiLU output is 8192 tokens x 53248 / 8
    # (config.json's intermediate_size over TP 8) in bf16
    r.claim("Llama 3 405B balanced: the fullest stage's layer-micro-batches", balanced / per_layer, 120.0)
    r.claim("Llama 3 405B: the SiLU output a fused SwiGLU recomputes", silu, 2 * 8192 * 53248 / 8, unit="B")
    r.claim("Llama 3 405B fused: the fullest stage's layer-micro-batches", fused / (per_layer - silu), 120.0)
    rows = []
    for label, acts in (
        ("as priced: 8 layers on the first stage, eager SwiGLU", mem.activations),
        ("the paper's balancing: 7 layers and the embedding on the first stage", balanced),
        ("and a fused SwiGLU that does not save the SiLU output (not printed)", fused),
    ):
        total = need - mem.activations + acts
        rows.append([label, f"{acts / 1e9:.1f}", f"{total / 1e9:.1f}", f"{capacity / 1e9:.1f}"])
        r.claim(
            f"Llama 3 405B table, {label}: needs - activations = the first row's, as printed",
            float(rows[-1][2]) - float(rows[-1][1]),
            (need - mem.activations) / 1e9,
            abs_tol=0.1,
            unit="GB",
        )
        r.claim(f"Llama 3 405B table, {label}: capacity as printed", float(rows[-1][3]), capacity * 1e-9, abs_tol=0.05)
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
