"""The planner on four requests (7B and 13B fine-tunes on 8 H100s, 70B on 64, 175B on 1024): plans, the
winner's breakdown and why it won (experiment planner), from distlab.planner.search; and the done-when request,
70B on 64 H100s with every dimension fixed (TP 8, PP 1, ZeRO-1, micro-batch 1).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.models.shapes import ModelShape
from distlab.planner.advice import add_advice
from distlab.planner.calibration import with_band
from distlab.planner.comms_checks import comms_by_hand
from distlab.planner.config import FRAGMENTATION_FRACTION, Cluster, Plan, Training, cluster, model, usable_bytes
from distlab.planner.cost import memory_per_gpu, step
from distlab.planner.cost_checks import check_step_causes
from distlab.planner.planner_checks import (
    check_async_tp,
    check_caption_tokens,
    check_fit_sets,
    check_fixed,
    check_fixed_compute,
    check_memory,
    check_overlap_column,
    check_scalars,
    check_seventy_table,
    check_throughput_cells,
    check_why,
    check_zero3,
)
from distlab.planner.planner_validation import claim_band
from distlab.planner.rules import LONG_SEQ, MIN_HEADROOM
from distlab.planner.search import (
    MAX_MICRO_BATCH,
    PRETRAIN_BATCH_TOKENS,
    RESIMULATE,
    VIRTUAL_CHUNKS,
    Estimate,
    explain,
    finetune_batch_sequences,
    search,
)
from distlab.planner.worked_plan_7b import ddp_bucket_bytes_of_torch
from distlab.planner.worked_plan_checks import budget

EXAMPLES = (("7B", "finetune", 1), ("13B", "finetune", 1), ("70B", "pretrain", 8), ("175B", "pretrain", 128))
FIXED_70B = {"tp": 8, "pp": 1, "zero": 1, "micro_batch": 1}  # the done-when command's layout
# the long-context example: Llama 2 7B, 32 sequences of 128k tokens on 4 nodes, tensor 4 x context 4 x data 2, ZeRO-2
LONG_NODES, LONG_SEQUENCES, LONG_SEQ_TOKENS = 4, 32, 131072
LONG_PLAN = Plan(dp=2, tp=4, cp=4, zero=2, micro_batch=1, microbatches=16)


@experiment(
    "planner",
    "the planner on four requests (7B and 13B fine-tunes on 8 H100s, 70B on 64, 175B on 1024): "
    "best plans, memory, step time, MFU with its band, and why",
    kind="computed",
)
def planner(device: str) -> Result:
    from dataclasses import replace

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
    h100 = cluster("H100-SXM").gpu
    by_hand = (1 - FRAGMENTATION_FRACTION) * value("planner.capacity-H100-SXM.reported_mib") * 2**20
    by_hand -= value("planner.memory-reserve.cuda_context_mib") * 2**20
    r.claim(
        "H100: usable = 95 % of the reported 81,559 MiB less the CUDA context",
        usable_bytes(h100),
        by_hand,
        rel_tol=1e-9,
        unit="B",
    )
    r.add("memory_efficiency", MEMORY_EFFICIENCY, "fraction", "assumed: memory-bound kernels' share of HBM bandwidth")
    r.add("fragmentation", FRAGMENTATION_FRACTION, "fraction", "assumed: the allocator's fragmentation margin")
    r.add("context_mib", value("planner.memory-reserve.cuda_context_mib"), "MiB", "CUDA context")
    r.add("nccl_gb", value("planner.memory-reserve.nccl_per_communicator_gb"), "GB", "NCCL buffers per communicator")
    r.add("nccl_channels", NCCL_CHANNELS, "SMs", "SMs an overlapped collective takes")
    r.add("tile_m", TILE_M, "", "rows of a GEMM thread-block's output tile")
    r.add("tile_n", TILE_N, "", "columns of a GEMM thread-block's output tile")
    r.add("cp_min_seq", LONG_SEQ, "tokens", "context parallelism is considered from this length")
    r.add("max_micro_batch", MAX_MICRO_BATCH, "sequences", "largest micro-batch searched")
    r.add("resimulate", RESIMULATE, "plans", "plans re-timed with the pipeline simulator")
    r.add("virtual_min", min(VIRTUAL_CHUNKS), "", "fewest interleaved chunks per stage the search tries")
    r.add("virtual_max", max(VIRTUAL_CHUNKS), "", "most interleaved chunks per stage the search tries")
    r.claim(
        "the page's 'from the fewest to the most chunks': counts between them that the search does not try",
        len(set(range(min(VIRTUAL_CHUNKS), max(VIRTUAL_CHUNKS) + 1)) - set(VIRTUAL_CHUNKS)),
        0,
    )
    r.add("mtnlg_pp", value("megatron_runs.gpt-530b.pp"), "stages", "Narayanan et al.'s 530B run: pipeline stages")
    r.add("mtnlg_layers", value("megatron_runs.gpt-530b.layers"), "layers", "... of a model with this many layers")
    rows: list[list] = []
    # what the by-hand checks read: each table row's (model, plan, seq, GPUs, tokens per step); each request's
    # (model, candidates, kept plans, seq, usable bytes, host bytes per GPU); each quoted request's (tokens, GPUs, seq)
    shown: dict[str, list] = {"examples": [], "seventy": [], "overlap": []}
    fit_requests: list[tuple] = []
    timed: list[tuple] = []  # (estimate, model, cluster, training, CONFIGS name) of every plan a table shows
    quoted: dict[str, tuple[int, int, int]] = {}
    usable = budget("H100-SXM")
    host = value("host_links.DGX-H100-host.host_memory_tb") * 1e12  # a DGX H100's host memory, the data's own field
    for name, task, nodes in EXAMPLES:
        m, c = model(name), cluster("H100-SXM", nodes=nodes)
        t = Training(
            global_batch_tokens=(PRETRAIN_BATCH_TOKENS if task == "pretrain" else finetune_batch_sequences() * m.seq),
            seq=m.seq,
            task=task,
        )
        ranked = search(m, c, t)
        best = ranked[0]
        timed += [(e, m, c, t, name) for e in ranked[:6]]  # the shown plans and their runners-up
        this = (t.global_batch_tokens, c.gpus, t.seq)
        shown["examples"].append((name, best.plan, t.seq, c.gpus, t.global_batch_tokens))
        kept = [e.plan for e in ranked]
        fit_requests.append((name, _allowed(m, c, t), kept, t.seq, usable, host / c.gpus_per_node))
        key = name.lower()
        quoted[key] = this
        if name == "70B":
            quoted["fixed"] = this
        lo, hi = mfu_band(best.time.mfu)
        rows.append(
            [
                f"{name} {task}",
                f"{nodes} x 8",
                len(ranked),
                best.plan.label(),
                Quantity(best.memory_bytes, "B"),
                f"{best.headroom_fraction:.1%}",
                Quantity(best.step_seconds, "s"),
                with_band(best.time.mfu),
                f"{best.time.tokens_per_second:,.0f}",
            ]
        )
        r.add(f"{key}_headroom", best.headroom_fraction, "fraction", f"{name}: the recommended plan's headroom")
        r.claim(
            f"{name}: the recommended plan leaves at least {MIN_HEADROOM:.0%} of usable memory free",
            1 - best.memory.device_bytes / usable_bytes(c.gpu),
            MIN_HEADROOM,
            relation=">=",
            unit="fraction",
            formula="1 - memory per GPU / (reported capacity - CUDA context - fragmentation)",
        )
        r.add(f"{key}_plans", len(ranked), "", f"{name}: plans that fit")
        r.add(f"{key}_mfu", best.time.mfu, "fraction", f"{name}: the best plan's MFU by the model")
        r.add(f"{key}_mfu_low", lo, "fraction", f"{name}: the low end of its band")
        r.add(f"{key}_mfu_high", hi, "fraction", f"{name}: the high end of its band")
        r.add(f"{key}_step", best.step_seconds, "s", f"{name}: the best plan's step")
        r.add(f"{key}_memory", best.memory_bytes, "B", f"{name}: the best plan's memory per GPU")
        if name == "70B":
            _seventy(r, m, c, t, ranked)
            check_why(r, ranked, t.seq, t.global_batch_tokens, c.gpus_per_node)
            shown["seventy"] = [(name, e.plan, t.seq, c.gpus, t.global_batch_tokens) for e in ranked[:6]]
            add_advice(r, "seventy", m, c, t, ranked)
            both = _overlap_both(r, m, c, t)
            timed += [(e, m, c, replace(t, tp_overlap=on), name) for e, on in zip(both, (False, True), strict=True)]
            check_overlap_column(r, [e.time.breakdown.as_dict() for e in both])
            shown["overlap"] = [(name, e.plan, t.seq, c.gpus, t.global_batch_tokens) for e in both]
            per_node = c.gpus_per_node
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
            _zero3(r, m, c, t, best)
    r.table(
        "examples",
        [
            "request",
            "H100 nodes x GPUs",
            "plans that fit",
            "recommended plan",
            "memory per GPU",
            "headroom",
            "step",
            "MFU (band)",
            "tokens/s",
        ],
        rows,
        caption="Mixed-precision AdamW (16 bytes per parameter of model state), FlashAttention; fine-tunes at "
        f"{finetune_batch_sequences()} "
        f"sequences per step, pretraining at {PRETRAIN_BATCH_TOKENS / 2**20:g}M tokens (computed)",
    )
    check_step_causes(r, timed, ddp_bucket_bytes_of_torch())
    check_caption_tokens(r, PRETRAIN_BATCH_TOKENS, finetune_batch_sequences())
    check_throughput_cells(r, shown)
    check_memory(r, shown, per_node)
    check_fit_sets(r, fit_requests, MIN_HEADROOM)
    _consistency(r)
    quoted["long"] = (LONG_SEQUENCES * LONG_SEQ_TOKENS, cluster("H100-SXM", nodes=LONG_NODES).gpus, LONG_SEQ_TOKENS)
    check_scalars(r, quoted)
    _tp_overlap(r)
    check_async_tp(r)
    comms_by_hand(r)
    claim_band(r)  # the MFU bands this page quotes
    return r


ASYNC_TP_RUNS = {"70b": "tt-llama31-70b-h100-256-fsdp32-tp8-bf16", "8b": "tt-llama31-8b-h100-64-fsdp8-tp8-bf16"}


def _tp_overlap(r: Result) -> None:
    """TP overlap against PyTorch's async-TP measurements: torchtitan's Llama 3 TP 8 runs timed with overlap off
    and on, the forward's speedup compared with the published one (planner.toml, async-tp-*)."""
    from dataclasses import replace

    from distlab.core.facts import value
    from distlab.planner.corpus import request, runs

    for key, row in ASYNC_TP_RUNS.items():
        m, c, t, fixed = request(runs()[row])
        off, on = (search(m, c, replace(t, tp_overlap=ov), fixed=fixed)[0] for ov in (False, True))
        fwd = off.time.forward_seconds / on.time.forward_seconds - 1
        e2e = off.step_seconds / on.step_seconds - 1
        r.add(f"async_tp_{key}_forward", fwd, "fraction", f"Llama 3 {key.upper()}, TP 8: forward speedup of overlap")
        r.add(f"async_tp_{key}_e2e", e2e, "fraction", f"Llama 3 {key.upper()}, TP 8: step speedup of overlap")
        r.claim(
            f"Llama 3 {key.upper()} at TP 8: the forward speedup TP overlap gives = PyTorch's async-TP measurement",
            fwd,
            value(f"planner.async-tp-llama3-{key}.forward_speedup"),
            rel_tol=0.35,
            unit="fraction",
            formula="(t-1)/t of each GEMM hides its collective, less the SMs NCCL takes",
        )


def _overlap_both(r: Result, m: ModelShape, c: Cluster, t: Training) -> list[Estimate]:
    """70B on 64 H100s with TP overlap off (the default: every stack makes it opt-in) and on (--tp-overlap); returns
    the two recommended plans' estimates."""
    from dataclasses import replace

    rows, plans = [], []
    for key, on in (("off", False), ("on", True)):
        e = search(m, c, replace(t, tp_overlap=on))[0]
        rows.append(
            [
                "on (--tp-overlap)" if on else "off (default)",
                e.plan.label(),
                Quantity(e.memory_bytes, "B"),
                f"{e.headroom_fraction:.1%}",
                Quantity(e.step_seconds, "s"),
                with_band(e.time.mfu),
                f"{e.time.breakdown.exposed_tp / e.step_seconds:.1%}",
            ]
        )
        plans.append(e)
        r.add(f"overlap_{key}_step", e.step_seconds, "s", f"70B, TP overlap {key}: the recommended plan's step")
        r.add(f"overlap_{key}_tp", e.plan.tp, "", f"70B, TP overlap {key}: its TP")
    r.claim(
        "70B: overlapping TP collectives cannot make the recommended step slower",
        r.quantities["overlap_on_step"].value,
        r.quantities["overlap_off_step"].value,
        relation="<=",
        rel_tol=0.02,  # the headroom rule may pick a plan up to the band slower; here it does not by more than 2 %
        unit="s",
    )
    r.table(
        "overlap",
        ["TP overlap", "recommended plan", "memory per GPU", "headroom", "step", "MFU (band)", "TP exposed"],
        rows,
        caption="distlab plan --model 70B --nodes 8, with and without --tp-overlap (computed)",
    )
    return plans


def _seventy(r: Result, m: ModelShape, c: Cluster, t: Training, ranked: list[Estimate]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from distlab.planner.search import fastest

    top, quick = ranked[:6], fastest(ranked)
    r.table(
        "seventy",
        ["#", "plan", "memory per GPU", "headroom", "step", "MFU (band)"],
        [
            [
                f"{i}" + (" (recommended)" if i == 1 else " (fastest)" if e is quick else ""),
                e.plan.label(),
                Quantity(e.memory_bytes, "B"),
                f"{e.headroom_fraction:.1%}",
                Quantity(e.step_seconds, "s"),
                with_band(e.time.mfu),
            ]
            for i, e in enumerate(top, 1)
        ],
        caption="Llama 2 70B pretraining on 8 nodes of 8 H100s: the recommended plan (the headroom rule), then the "
        "others fastest first (computed)",
    )
    from distlab.planner.search import freer

    free = freer(m, c, t, ranked)
    r.table(
        "why",
        ["why the first plan"],
        [[line] for line in explain(m, c, t, ranked, free=free)],
        caption="distlab plan --model 70B --nodes 8, its explanation",
    )
    # what keeping to one stack costs: the unrestricted search's answer (no stack runs it) against the recommendation
    r.add("seventy_unrestricted", int(free is not None), "", "1 if a combination no stack ships would be faster")
    if free is not None:
        r.add("seventy_unrestricted_faster", free["faster_fraction"], "fraction", "how much faster it would be")
        r.data["unrestricted_label"] = free["label"]
        r.claim(
            "70B: the unrestricted plan's gain is the ratio of the two step times",
            free["faster_fraction"],
            top[0].step_seconds / free["step_seconds"] - 1,
            rel_tol=1e-9,
            unit="fraction",
        )
        from distlab.planner.calibration import within_band

        free_mfu = top[0].time.mfu * top[0].step_seconds / free["step_seconds"]  # same tokens: MFU ~ 1 / step
        r.claim(
            "70B: the unrestricted plan is inside the recommended plan's error band (the page's 'inside its band')",
            int(within_band(top[0].time.mfu, free_mfu)),
            1,
        )
    r.add("seventy_tp", top[0].plan.tp, "", "70B: the best plan's TP")
    r.add("seventy_pp", top[0].plan.pp, "", "70B: the best plan's PP")
    r.add("seventy_zero", top[0].plan.zero, "", "70B: the best plan's ZeRO stage")
    r.claim(
        "70B on 64 GPUs: the recommended plan uses a pipeline (the worked problem's premise)",
        top[0].plan.pp,
        2,
        relation=">=",
    )
    r.claim(
        "70B on 64 GPUs: the best plan keeps tensor parallelism inside a node",
        top[0].plan.tp,
        c.gpus_per_node,
        relation="<=",
        formula="chapter 7's rule, not imposed by the ranking",
    )
    # The headroom paragraph's illustration: the fullest of these six plans, and how little it leaves free.
    fullest = min(top, key=lambda e: e.headroom_fraction)
    used = fullest.memory_bytes / fullest.usable_bytes
    r.add("seventy_fullest_used", used, "fraction", "70B: the share of usable memory the fullest of the six best fills")
    r.add("seventy_fullest_rank", top.index(fullest) + 1, "", "70B: that plan's place in the table")
    r.claim(
        "70B: the fullest of the six best plans leaves less free than the headroom rule asks",
        1 - used,
        MIN_HEADROOM,
        relation="<=",
        unit="fraction",
        formula="1 - memory per GPU / usable per GPU, from the table's own columns",
    )
    parts = ("compute", "recompute", "exposed_tp", "exposed_dp", "exposed_cp_ep", "bubble", "offload", "optimizer")
    fig, ax = plt.subplots(figsize=(10, 3.6))
    left = [0.0] * len(top)
    for part in parts:
        vals = [getattr(e.time.breakdown, part) for e in top]
        ax.barh(range(len(top)), vals, left=left, label=part.replace("_", " "))
        left = [a + b for a, b in zip(left, vals)]
    check_seventy_table(r, [{p: getattr(e.time.breakdown, p) for p in parts} for e in top], ax)
    ax.set_yticks(range(len(top)), [f"{i}. {e.plan.label()}" for i, e in enumerate(top, 1)], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="seconds per step", title="70B on 64 H100s: where each plan's step goes")
    ax.legend(fontsize=7, ncol=4, loc="lower right")
    fig.tight_layout()
    r.figure("seventy", fig, "Step time by cause for the six best plans (distlab.planner.cost, computed)")


def _allowed(m: ModelShape, c: Cluster, t: Training) -> list[Plan]:
    """The candidates a default search sizes: chapter 7's rules, and what one stack ships whole."""
    from distlab.planner.search import candidates
    from distlab.planner.stacks import allows

    return [p for p in candidates(m, c, t) if allows(t.framework, p, t.tp_overlap)]


def _training_rate(c: Cluster) -> float:
    """FLOP/s of a training step's matmuls: the sustained matmul share of the dense bf16 peak x the training share."""
    from distlab.planner.kernels import matmul_fraction, training_share

    return matmul_fraction(c.gpu) * c.gpu.peak_flops("bf16") * training_share()


def _zero3(r: Result, m: ModelShape, c: Cluster, t: Training, best: Estimate) -> None:
    """70B on 64 GPUs with ZeRO-3 and no pipeline: the best such plan, and one layer's gather against one layer's
    forward on one micro-batch (the condition under which ZeRO-3 hides)."""
    from distlab.planner import comms
    from distlab.planner.cost import stage_time

    e = search(m, c, t, fixed={"pp": 1, "zero": 3})[0]
    p = e.plan
    g = comms.group(c, p.dp * p.cp, p.tp)
    gather = comms.seconds("all-gather", 2 * m.params_per_layer() // p.tp, g)
    fwd = stage_time(m, c, t, p, m.layers, first=False, last=False).forward / m.layers
    r.add("zero3_tp", p.tp, "", "70B, ZeRO-3 without a pipeline: the best such plan's TP")
    r.add("zero3_micro_batch", p.micro_batch, "sequences", "its micro-batch")
    r.add("zero3_step", e.step_seconds, "s", "its step")
    r.add("zero3_slower", e.step_seconds / best.step_seconds - 1, "fraction", "how much slower than the best plan")
    r.add("zero3_exposed_dp", e.time.breakdown.exposed_dp / e.step_seconds, "fraction", "its exposed ZeRO share")
    r.add("zero3_gather", gather, "s", "one layer's all-gather over the data-parallel group")
    r.add("zero3_forward", fwd, "s", "one layer's forward on one micro-batch")
    check_zero3(r, e.time.breakdown.as_dict(), _training_rate(c), t.seq, c.gpus, c.gpus_per_node)
    r.claim(
        "70B, ZeRO-3 across 64 GPUs without a pipeline: the planner ranks it below the recommended plan",
        e.step_seconds,
        best.step_seconds,
        relation=">=",
        unit="s",
        formula="per-layer gathers and reduce-scatters per micro-batch, each with its latency and SM share",
    )


def _fixed(r: Result, m: ModelShape, c: Cluster, t: Training) -> None:
    """`distlab plan --model 70B --gpu H100-SXM --nodes 8 --tp 8 --pp 1 --zero 1 --micro-batch 1`: one plan."""
    only = search(m, c, t, fixed=FIXED_70B)
    e = only[0]
    b = e.time.breakdown
    r.add("fixed_plans", len(only), "", "plans with TP 8, PP 1, ZeRO-1, micro-batch 1 fixed")
    r.add("fixed_mfu", e.time.mfu, "fraction", "that plan's MFU by the model")
    from distlab.planner.calibration import mfu_band

    lo, hi = mfu_band(e.time.mfu)
    r.add("fixed_mfu_low", lo, "fraction", "the low end of its band")
    r.add("fixed_mfu_high", hi, "fraction", "the high end of its band")
    r.add("fixed_tokens_per_second", e.time.tokens_per_second, "tokens/s", "that plan's throughput")
    r.add("fixed_step", e.step_seconds, "s", "that plan's step")
    r.add("fixed_tp_share", b.exposed_tp / e.step_seconds, "fraction", "its exposed TP share of the step")
    from dataclasses import replace

    ov = search(m, c, replace(t, tp_overlap=True), fixed=FIXED_70B)[0]
    r.add("fixed_tp_share_overlap", ov.time.breakdown.exposed_tp / ov.step_seconds, "fraction", "... with overlap")
    r.add("fixed_step_overlap", ov.step_seconds, "s", "that plan's step with --tp-overlap")
    check_fixed(r, b.as_dict(), ov.time.breakdown.as_dict())
    r.claim(
        "70B fixed TP 8 plan: overlap leaves less of TP's collectives exposed than none",
        ov.time.breakdown.exposed_tp,
        b.exposed_tp,
        relation="<=",
        unit="s",
        formula="without overlap every TP collective is on the critical path",
    )
    r.data["fixed_label"] = e.plan.label()
    # a hand derivation of the compute: 6N + 6Lhs FLOPs per token (causal attention, the half FlashAttention
    # computes) at the sustained matmul rate; the planner's is larger by the memory-bound kernels and the
    # smaller GEMMs' waves, which at this size are a few per cent
    from distlab.gpu.flops import flops_per_token

    n = m.params()
    flops = (6 * n + 6 * m.layers * m.hidden * t.seq) * t.global_batch_tokens / c.gpus
    by_hand = flops / _training_rate(c)
    r.add("fixed_compute", b.compute, "s", "that plan's compute time per step")
    r.add("fixed_compute_by_hand", by_hand, "s", "6N + 6Lhs FLOPs per token at the training matmul rate")
    check_fixed_compute(
        r,
        flops_per_token(n, m.layers, m.hidden, t.seq),
        6 * m.layers * m.hidden * t.seq,
        t.global_batch_tokens / c.gpus,
        _training_rate(c),
    )
    r.claim(
        "70B fixed plan: compute >= 6N + 6Lhs FLOPs per token at the sustained matmul rate x the training share",
        b.compute,
        by_hand,
        relation=">=",
        unit="s",
        formula="(6N + 6 L h s) x tokens / (GPUs x sustained FLOP/s x training share)",
    )
    r.claim(
        "70B fixed plan: compute <= 1.3 x that ideal (partial waves, FlashAttention's lower rate, memory-bound work)",
        b.compute,
        1.3 * by_hand,
        relation="<=",
        unit="s",
    )
    weights = 2 * n / 8
    r.claim(
        "70B fixed plan: bf16 weights per GPU = 2 bytes x N / TP 8", e.memory.weights, weights, rel_tol=0.02, unit="B"
    )
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

    c = cluster("H100-SXM", nodes=LONG_NODES)
    t = Training(global_batch_tokens=LONG_SEQUENCES * LONG_SEQ_TOKENS, seq=LONG_SEQ_TOKENS)
    p = LONG_PLAN
    e = step(m, c, t, p)
    r.add("long_seq_tokens", t.seq, "", "the long-context example's sequence length, tokens")
    r.add("long_gpus", c.gpus, "", "its GPUs")
    for key in ("tp", "cp", "dp", "zero"):
        r.add(f"long_{key}", getattr(p, key), "", f"its {key}")
    r.claim(
        "long-context example: its layout uses every GPU (tp x cp x dp = GPUs)",
        p.tp * p.cp * p.dp * p.pp,
        c.gpus,
    )
    r.add("long_mfu", e.mfu, "fraction", "7B, 131k-token sequences on 32 H100s: MFU by 6N + 12Lhs")
    r.add("long_mfu_causal", e.mfu_causal, "fraction", "the same plan counting causal attention as half")
    from distlab.planner.calibration import mfu_band

    lo, hi = mfu_band(e.mfu_causal)
    r.add("long_mfu_causal_low", lo, "fraction", "the low end of its band")
    r.add("long_mfu_causal_high", hi, "fraction", "the high end of its band")
    r.claim(
        "131k-token 7B plan: MFU counting causal attention as half <= the matmuls' sustained share of the peak",
        e.mfu_causal,
        matmul_fraction(c.gpu),
        relation="<=",
        unit="fraction",
        formula="(6N + 6Lhs) tokens / (step x GPUs x peak) <= sustained matmul share",
    )
