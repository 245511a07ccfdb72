"""`distlab plan`: the planner on the command line (chapter 12). Every layout dimension may be fixed by a flag;
the others are searched. With all of them fixed it prices that one layout, or says in one line why it cannot run.
"""

from __future__ import annotations

import argparse

from distlab.core.cli import MAX_GPUS, MAX_TOKENS, UsageError, command, emit, number, parser, positive
from distlab.models.shapes import ModelShape
from distlab.planner.config import (
    ATTENTION,
    LOSSES,
    MATMUL_DTYPES,
    OFFLOAD,
    OPTIMIZERS,
    PEFT,
    PRECISIONS,
    RECOMPUTE,
    RECOMPUTE_MODULES,
    SCHEDULES,
    STACKS,
    TASKS,
    Cluster,
    Plan,
    Training,
    cluster,
    model,
)
from distlab.planner.rules import MIN_HEADROOM
from distlab.planner.search import (
    FIXABLE,
    PRETRAIN_BATCH_TOKENS,
    NothingFits,
    explain,
    fastest,
    finetune_batch_sequences,
    freer,
    search,
    versus_fastest,
)
from distlab.planner.stacks import UNRESTRICTED, runners
from distlab.planner.stages import split_params

MAX_PARALLEL = 2**20  # a parallel size beyond a million GPUs is no request
MAX_HEADROOM = 0.9  # a rule leaving more than 90 % of the memory free recommends nothing useful


def resolve_model(spec: str):
    """(the dense shape, the MoE experts or None): a preset, a JSON file, or an MoE model of moe_models.toml. A JSON
    file with experts >= 1 is a mixture of experts, priced through the same lines as the built-in ones
    (distlab.planner.moe.moe_from_row); a key neither a shape nor an MoE key is refused by name."""
    import dataclasses
    import json
    from pathlib import Path

    from distlab.planner.moe import MOE_KEYS, moe_from_row, moe_model, moe_names

    if not spec.endswith(".json"):
        return moe_model(spec) if spec in moe_names() else (model(spec), None)
    try:
        obj = json.loads(Path(spec).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read model file {spec}: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"model file {spec}: a JSON object of shape keys, not {type(obj).__name__}")
    if not obj.get("experts"):
        return model(spec), None
    allowed = {f.name for f in dataclasses.fields(ModelShape)} | set(MOE_KEYS)
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ValueError(f"model file {spec}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    try:
        return moe_from_row(obj.get("name", Path(spec).stem), obj)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"model file {spec}: {exc}") from None


DEFAULT_GPUS_PER_NODE = 8  # an HGX/DGX board: eight GPUs on one NVLink switch fabric


def node_layout(args) -> tuple[int, int]:
    """(GPUs per node, nodes) from --gpus (the total, as `distlab memory` and `distlab mfu` take it), --gpus-per-node
    and --nodes. `--gpus 64` is eight nodes of eight, not one node of 64; fewer GPUs than a node is one node of that
    many. A total that is not a whole number of nodes, or disagrees with --nodes, is refused by name."""
    per_node = args.gpus_per_node
    if args.gpus is None:
        return per_node or DEFAULT_GPUS_PER_NODE, args.nodes or 1
    if per_node is None:
        per_node = min(args.gpus, DEFAULT_GPUS_PER_NODE)
    if args.gpus % per_node:
        raise UsageError(
            f"distlab plan: --gpus {args.gpus} is not a whole number of {per_node}-GPU nodes; give --gpus-per-node"
        )
    nodes = args.gpus // per_node
    if args.nodes is not None and args.nodes != nodes:
        raise UsageError(
            f"distlab plan: --gpus {args.gpus} is {nodes} nodes of {per_node}, not --nodes {args.nodes}; give one or "
            "the other"
        )
    return per_node, nodes


def request(args) -> tuple[ModelShape, Cluster, Training]:
    m, moe = resolve_model(args.model)
    per_node, nodes = node_layout(args)
    c = cluster(
        args.gpu,
        gpus_per_node=per_node,
        nodes=nodes,
        intra=args.intra_bw,
        inter=args.inter_bw,
        nics_per_node=args.nics_per_node,
        nvlink_domain=args.nvlink_domain,
        oversubscription=args.oversubscription,
        rank_jitter=args.rank_jitter,
    )
    seq = args.seq or m.seq
    default = PRETRAIN_BATCH_TOKENS if args.task == "pretrain" else finetune_batch_sequences() * seq
    t = Training(
        global_batch_tokens=args.global_batch_tokens or default,
        seq=seq,
        precision=args.precision,
        matmul_dtype=args.matmul_dtype,
        optimizer=args.optimizer,
        task=args.task,
        attention=args.attention,
        dropout=args.dropout,
        sequence_parallel=args.sequence_parallel,
        tp_overlap=args.tp_overlap,
        moe=moe,
        framework=args.framework,
        peft=args.peft,
        lora_rank=args.lora_rank,
        recompute_modules=recompute_modules(args.recompute_modules, m, moe),
        activation_offload=args.activation_offload,
        loss=args.loss,
        reshard_after_forward=args.reshard_after_forward,
    )
    return m, c, t


def recompute_modules(spec: str, m: ModelShape, moe) -> tuple[str, ...]:
    """--recompute-modules core_attn,mlp: Megatron-Core's names, each one the model has."""
    names = tuple(x.strip() for x in spec.split(",") if x.strip())
    bad = [x for x in names if x not in RECOMPUTE_MODULES]
    if bad or not names:
        raise UsageError(
            f"distlab plan: --recompute-modules takes a comma-separated list of {', '.join(RECOMPUTE_MODULES)}, "
            f"not {spec!r}"
        )
    if {"moe", "moe_act"} & set(names) and moe is None and not m.experts:
        raise UsageError(f"distlab plan: recompute modules moe and moe_act need an MoE model; {m.name} is dense")
    return names


def fixed_dims(args) -> dict:
    """The layout dimensions the user fixed, by the planner's names."""
    out = {k: getattr(args, k) for k in FIXABLE if getattr(args, k, None) is not None}
    if out.get("virtual", 1) > 1 and "schedule" not in out:
        out["schedule"] = "interleaved"
    if "schedule" in out and out["schedule"] != "interleaved" and out.get("virtual", 1) > 1:
        raise UsageError(f"distlab plan: --virtual applies only to --schedule interleaved, not {out['schedule']}")
    return out


@command("plan", "parallelism plans that fit a model on a cluster: memory, step time and MFU, best first")
def plan_command(argv: list[str]) -> int:
    p = parser(
        "plan",
        "Enumerate the plans (DP, TP, PP, CP, EP, ZeRO stage, micro-batch, schedule, recompute, offload) that\n"
        "fit a model on a cluster, time each with distlab's cost model, and rank them by step time. Fix any\n"
        "dimension with its flag (the rest are searched); fix all of them to price one layout.\n"
        "Memory per GPU by category; step time by cause; MFU against the GPU's dense bf16 peak, with the band\n"
        "the model's errors on published runs put around it (chapter 13).",
    )
    p.add_argument(
        "--model",
        required=True,
        help="preset (1B, 7B, 13B, 70B, 175B), an MoE model (Mixtral-8x7B, DeepSeek-V3) or a JSON file",
    )
    p.add_argument("--gpu", default="H100-SXM", help="accelerator (see `distlab gpus`; default H100-SXM)")
    p.add_argument(
        "--gpus",
        type=positive(int, MAX_GPUS),
        default=None,
        help="GPUs in all: nodes of --gpus-per-node (default 8; fewer GPUs than that are one node)",
    )
    p.add_argument(
        "--gpus-per-node",
        type=positive(int, 1024),
        default=None,
        help=f"GPUs per node (default {DEFAULT_GPUS_PER_NODE})",
    )
    p.add_argument(
        "--nodes", type=positive(int, MAX_GPUS), default=None, help="nodes (default 1, or --gpus / per node)"
    )
    p.add_argument(
        "--intra-bw",
        default=None,
        help="link inside a node: a name from interconnect.toml or GB/s per direction (default: the GPU's NVLink)",
    )
    p.add_argument(
        "--inter-bw",
        default="InfiniBand-NDR",
        help="one NIC between nodes: a name or GB/s per direction (default InfiniBand-NDR, 50 GB/s)",
    )
    p.add_argument(
        "--nics-per-node",
        type=positive(int, 1024),
        default=None,
        help="NICs per node (default: one per GPU, as a DGX); node egress = NICs x NIC bandwidth",
    )
    p.add_argument(
        "--nvlink-domain",
        type=positive(int, MAX_GPUS),
        default=None,
        help="GPUs per NVLink domain, a multiple of --gpus-per-node that divides the GPUs (default: one node; "
        "a GB200 NVL72 rack: --gpus-per-node 4 --nvlink-domain 72)",
    )
    p.add_argument(
        "--oversubscription",
        type=number(float, minimum=1, maximum=64),
        default=1.0,
        help="the fabric's oversubscription between NVLink domains (default 1: full bisection bandwidth)",
    )
    p.add_argument(
        "--rank-jitter",
        type=number(float, minimum=0, maximum=0.5),
        default=0.0,
        help="one rank's step-time spread (std / mean): the step waits for the slowest of the N ranks, "
        "jitter x E[max of N normals] (chapter 10; 0.02 is its scenario; default 0, off)",
    )
    p.add_argument(
        "--global-batch-tokens",
        type=positive(int),
        default=None,
        help="tokens per optimizer step (default: 4M for pretrain, 64 sequences for finetune)",
    )
    p.add_argument("--seq", type=positive(int, MAX_TOKENS), default=None, help="sequence length (default: the model's)")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="mixed",
        help="model-state bytes per parameter: mixed (bf16 + fp32 master and moments, 16 B; the default), "
        "mixed-fp32-grads (Megatron's fp32 main_grad, 18 B), mixed-fp32-accum (20 B), fp32, bf16 (pure bf16: "
        "weights, gradients and moments, 8 B), mixed-bf16-moments (Megatron-Core's precision-aware optimizer, 14 B) "
        "or mixed-bf16-state (bf16 weights, gradients, parameter copy and moments: Apex's DistributedFusedAdam at "
        "dtype bf16, 10 B)",
    )
    p.add_argument("--matmul-dtype", choices=MATMUL_DTYPES, default="bf16", help="weight matmuls in bf16 or fp8")
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default="adamw",
        help="adamw, sgd, adamw-8bit (bitsandbytes), adamw-8bit-paged, adamw-in-backward (no accumulation)",
    )
    p.add_argument(
        "--peft",
        choices=PEFT,
        default="none",
        help="none (every weight trains), lora (frozen bf16 base) or qlora (frozen NF4 base, double quantization)",
    )
    p.add_argument("--lora-rank", type=positive(int, 65536), default=16, help="LoRA/QLoRA adapter rank (default 16)")
    p.add_argument("--task", choices=TASKS, default="pretrain", help="pretrain or finetune (a full fine-tune)")
    p.add_argument("--attention", choices=ATTENTION, default="flash")
    layout = p.add_argument_group("layout (each fixes one dimension; the others are searched)")
    for name in ("tp", "pp", "dp", "cp", "ep"):
        layout.add_argument(f"--{name}", type=positive(int, MAX_PARALLEL), default=None, help=f"{name.upper()} size")
    layout.add_argument(
        "--dp-shard",
        type=positive(int, MAX_PARALLEL),
        default=None,
        help="hybrid sharding (HSDP): ZeRO shards over this many data-parallel ranks (one replica)",
    )
    layout.add_argument(
        "--dp-replicate",
        type=positive(int, MAX_PARALLEL),
        default=None,
        help="hybrid sharding: this many replicas, gradients all-reduced across them (dp-shard x dp-replicate = DP)",
    )
    layout.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=None, help="ZeRO stage (0 = DDP, 3 = FSDP)")
    layout.add_argument("--micro-batch", type=positive(int, MAX_TOKENS), default=None, help="sequences per micro-batch")
    layout.add_argument("--recompute", choices=RECOMPUTE, default=None, help="activation recomputation")
    layout.add_argument(
        "--recompute-modules",
        default="core_attn",
        help="what selective recomputation reruns, Megatron-Core's names, comma-separated: "
        f"{', '.join(RECOMPUTE_MODULES)} (default core_attn)",
    )
    layout.add_argument("--schedule", choices=SCHEDULES, default=None, help="pipeline schedule")
    layout.add_argument(
        "--virtual", type=positive(int, 1024), default=None, help="model chunks per stage (interleaved schedule)"
    )
    layout.add_argument("--offload", choices=OFFLOAD, default=None, help="CPU offload: none, optimizer, or params too")
    switches = p.add_argument_group("switches")
    switches.add_argument(
        "--dropout", action=argparse.BooleanOptionalAction, default=False, help="dropout (default off)"
    )
    switches.add_argument(
        "--activation-offload",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep saved activations in host memory between forward and backward, over PCIe (default off)",
    )
    switches.add_argument(
        "--reshard-after-forward",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ZeRO-3/FSDP: free gathered weights after each layer's forward (default on; off keeps the unsharded "
        "model until backward)",
    )
    switches.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Megatron sequence parallelism with TP (default on)",
    )
    switches.add_argument(
        "--tp-overlap",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="overlap TP collectives with the GEMMs next to them (default off: opt-in in every stack; "
        "Megatron-Core's --tp-comm-overlap, torchtitan's async TP under torch.compile)",
    )
    p.add_argument(
        "--framework",
        choices=STACKS + (UNRESTRICTED,),
        default="any",
        help="keep to what one training stack ships (schedules, ZeRO stages, offload, TP overlap; "
        "distlab/data/stacks.toml) and price its own buffers and loss (distlab/data/memory_buffers.toml); default "
        "any: any ONE stack, a plan only if some stack runs all of its features together; unrestricted: combine "
        "every technique the cost model prices even where no stack ships them together (for teaching, not launching)",
    )
    p.add_argument(
        "--loss",
        choices=LOSSES,
        default="stack",
        help="the cross-entropy: the stack's own (default), eager (PyTorch on upcast logits), hf (also keeps the "
        "bf16 logits and their upcast), fused (Megatron's vocab-parallel) or chunked (torchtune's, one chunk "
        "upcast at a time)",
    )
    p.add_argument(
        "--min-headroom",
        type=number(float, minimum=0, maximum=MAX_HEADROOM),
        default=MIN_HEADROOM,
        help=f"the headroom rule: among plans within chapter 13's error band of the fastest, recommend the fastest "
        f"that leaves this share of usable memory free (default {MIN_HEADROOM:g}; 0 ranks by time alone)",
    )
    p.add_argument("--top", type=positive(int, 10_000), default=5, help="how many plans to print (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable: a list of plans, best first")
    args = p.parse_args(argv)
    unrestricted = args.framework == UNRESTRICTED
    if unrestricted:
        args.framework = "any"
    try:
        moe = resolve_model(args.model)[1]
    except ValueError as exc:
        raise UsageError(f"distlab plan: {exc}") from None
    if args.ep and args.ep > 1 and not moe:
        raise UsageError(f"distlab plan: --ep applies to mixture-of-experts models, and {args.model} is dense")
    if args.ep and moe and moe.experts % args.ep:
        raise UsageError(f"distlab plan: --ep {args.ep} does not divide the {moe.experts} experts")
    fixed = fixed_dims(args)
    if args.dp_shard and args.dp_replicate and args.dp and args.dp_shard * args.dp_replicate != args.dp:
        raise UsageError(
            f"distlab plan: --dp-shard {args.dp_shard} x --dp-replicate {args.dp_replicate} is not --dp {args.dp}"
        )
    try:
        m, c, t = request(args)
    except ValueError as exc:  # a cluster that cannot be built (an NVLink domain that does not divide the GPUs)
        raise UsageError(f"distlab plan: {str(exc).removeprefix('cluster: ')}") from None
    try:
        ranked = search(m, c, t, fixed=fixed, min_headroom=args.min_headroom, unrestricted=unrestricted)
    except NothingFits as exc:
        raise UsageError(f"distlab plan: {exc}") from None
    except ValueError as exc:  # a switch the chosen stack does not ship
        raise UsageError(f"distlab plan: {exc}") from None
    free = None if unrestricted else freer(m, c, t, ranked, fixed=fixed, min_headroom=args.min_headroom)
    reasons = explain(m, c, t, ranked, args.min_headroom, free)
    quick = fastest(ranked)
    top = ranked[: max(args.top, 2 if quick is not ranked[0] else 1)]
    plans = [
        e.to_dict() | {"recommended": i == 0, "fastest": e is quick, "stacks": list(runners(e.plan, t))}
        for i, e in enumerate(top)
    ]
    plans[0]["reasons"] = reasons
    plans[0]["min_headroom"] = args.min_headroom
    plans[0]["fastest_plan"] = versus_fastest(ranked)
    plans[0]["unrestricted_plan"] = free
    plans[0]["cluster"] = {
        "gpus": c.gpus,
        "gpus_per_node": c.gpus_per_node,
        "nvlink_domain": c.domain,
        "oversubscription": c.oversubscription,
        "rank_jitter": c.rank_jitter,
    }
    lines = [
        f"{m.name} ({_params_text(m, t)}), {t.task}, "
        f"{t.global_batch_tokens:,} tokens per step of {t.seq:,}-token sequences, on {c.describe()}",
        f"{len(ranked)} plan{'s' if len(ranked) != 1 else ''} fit"
        + (f" with {', '.join(f'{k} {v}' for k, v in fixed.items())} fixed" if fixed else "")
        + f"; the best {len(plans)}:",
        "",
    ]
    for i, e in enumerate(top, 1):
        lo, hi = plans[i - 1]["mfu_band"]
        tag = " (recommended)" if i == 1 else (" (fastest)" if e is quick else "")
        lines.append(
            f"{i}. {e.plan.label()}{tag}\n   {e.memory_bytes / 1e9:.1f} of {e.usable_bytes / 1e9:.1f} GB/GPU "
            f"(headroom {e.headroom_fraction:.1%}), step {e.step_seconds:.3g} s, MFU "
            f"{e.time.mfu:.1%} (band {lo:.0%}-{hi:.0%}), {e.time.tokens_per_second:,.0f} tokens/s"
        )
    lines += ["", "Why the first:"] + [f"  - {r}" for r in reasons]
    emit(plans, args.json, "\n".join(lines))
    return 0


def _params_text(m: ModelShape, t: Training) -> str:
    """A dense model's parameters; an MoE's total (every expert) and the active ones a token passes through."""
    if t.moe is None:
        return f"{m.params() / 1e9:.2f}B parameters"
    total = sum(split_params(m, t.moe, Plan()))
    return f"{total / 1e9:.2f}B parameters, {m.params() / 1e9:.2f}B active, MoE"
