"""The practice questions, one experiment each: will a 13B full fine-tune fit (practice-13b), a plan for 70B
on 64 GPUs (practice-70b), ZeRO-3 versus tensor parallelism (practice-zero3-vs-tp), why FlashAttention is
faster (practice-flash), a 32-GPU job at 28 % MFU (practice-mfu-budget), and a 70B budget with its
checkpoint interval (practice-checkpoint).

Each applies the planner to a scenario; the scenario's inputs are named constants here, everything else is
computed. The H100 figures are divided by the model's optimism measured in chapter 13
(distlab.planner.planner_validation.h100_optimism).
"""

from __future__ import annotations

import math

from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.planner_validation import h100_optimism
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import finetune, strategy_table


# ---------------------------------------------------------------- practice (a): will a 13B full fine-tune fit?
@experiment(
    "practice-13b",
    "practice: does a 13B full fine-tune fit on 80 GB GPUs? memory per strategy and the fewest GPUs",
    kind="computed",
)
def practice_13b(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.planner.search import NothingFits
    from distlab.scaling_laws import sft_tokens

    r = Result("practice-13b", kind="computed")
    m, c, t = finetune("13B")
    n = m.params()
    r.add("params", n / 1e9, "billion", "Llama 2 13B parameters")
    r.add("states_bytes", 16 * n, "B", "16 bytes per parameter")
    r.add("states_over_hbm", 16 * n / c.gpu.hbm_bytes, "", "model state / one GPU's memory")
    r.claim(
        "13B: model state alone exceeds two 80 GB GPUs",
        16 * n,
        2 * c.gpu.hbm_bytes,
        relation=">=",
        unit="B",
        formula="16Ψ",
    )
    strategy_table(
        r,
        "strategies",
        m,
        c,
        t,
        names=("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP", "ZeRO-3 + CPU offload", "TP 8 (no ZeRO)", "TP 2 x ZeRO-3"),
    )
    rows = []
    for gpus in (1, 2, 4, 8):
        m, c, t = finetune("13B", gpus_per_node=gpus)
        try:
            e = search(m, c, t)[0]
        except NothingFits:
            rows.append([gpus, "nothing fits", "—", "—", "—", "—", "—"])
            r.add(f"gpus{gpus}_fits", 0, "", f"{gpus} GPUs: fits?")
            continue
        hours = sft_tokens() / t.global_batch_tokens * e.step_seconds / 3600
        rows.append(
            [
                gpus,
                e.plan.label(),
                Quantity(e.memory_bytes, "B"),
                Quantity(e.memory["host"], "B"),
                Quantity(e.step_seconds, "s"),
                f"{e.time['mfu']:.1%}",
                f"{hours:.1f}",
            ]
        )
        r.add(f"gpus{gpus}_fits", 1, "", f"{gpus} GPUs: fits?")
        r.add(f"gpus{gpus}_hours", hours, "h", f"{gpus} GPUs: Llama 2-Chat's SFT tokens")
        r.add(f"gpus{gpus}_host", e.memory["host"], "B", f"{gpus} GPUs: host memory per GPU")
        r.add(f"gpus{gpus}_mfu", e.time["mfu"], "fraction", f"{gpus} GPUs: MFU")
    r.table(
        "gpus",
        [
            "A100 80 GB GPUs",
            "best plan",
            "GPU memory",
            "host memory per GPU",
            "step",
            "MFU",
            "hours for Llama 2-Chat's SFT",
        ],
        rows,
        caption="The same fine-tune on fewer GPUs of one node: offloading to host memory makes few GPUs fit",
    )
    return r


# ---------------------------------------------------------------- practice (b): 70B on 64 GPUs
FAMILIES = {
    "FSDP only (TP 1)": lambda p: p.tp == 1 and p.pp == 1 and p.zero == 3 and p.offload == "none",
    "TP 2 x FSDP": lambda p: p.tp == 2 and p.pp == 1 and p.zero == 3 and p.offload == "none",
    "TP 8 x FSDP": lambda p: p.tp == 8 and p.pp == 1 and p.zero == 3 and p.offload == "none",
    "TP 8 x PP x DP, ZeRO-1 (Megatron)": lambda p: p.tp == 8 and p.pp > 1 and p.zero == 1 and p.offload == "none",
    "TP 4 x PP x DP, ZeRO-1": lambda p: p.tp == 4 and p.pp > 1 and p.zero == 1 and p.offload == "none",
}


@experiment(
    "practice-70b",
    "practice: a parallelism plan for 70B on 64 GPUs, plan families on InfiniBand NDR and on 100 GbE",
    kind="computed",
)
def practice_70b(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.planner.config import model
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS, NothingFits, explain

    r = Result("practice-70b", kind="computed")
    m = model("70B")
    t = Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=m.seq)
    bests = {}
    for net, inter in (("ndr", "InfiniBand-NDR"), ("eth", "Ethernet-100G")):
        c = cluster("H100-SXM", nodes=8, inter=inter)
        rows = []
        for fam, where in FAMILIES.items():
            try:
                e = search(m, c, t, where=where)[0]
            except NothingFits:
                rows.append([fam, "nothing fits", "—", "—", "—", "—", "—", "—"])
                continue
            sh = lambda *ks, e=e: sum(v for k, v in e.time["parts"].items() if any(x in k for x in ks)) / e.step_seconds
            rows.append(
                [
                    fam,
                    e.plan.label(),
                    Quantity(e.memory_bytes, "B"),
                    Quantity(e.step_seconds, "s"),
                    f"{e.time['mfu']:.1%}",
                    f"{sh('tensor-parallel'):.1%}",
                    f"{sh('bubble'):.1%}",
                    f"{sh('data-parallel'):.1%}",
                ]
            )
            if net == "ndr" and fam.startswith("TP 8 x FSDP"):
                r.add("tp8_tp_share", sh("tensor-parallel"), "fraction", "TP 8 x FSDP: all-reduce share of the step")
        ranked = search(m, c, t)
        bests[net] = ranked[0]
        r.table(
            f"families_{net}",
            [
                "family",
                "its best plan",
                "memory per GPU",
                "step",
                "MFU",
                "TP all-reduce",
                "bubble",
                "data-parallel exposed",
            ],
            rows,
            caption=f"Llama 2 70B pretraining, {PRETRAIN_BATCH_TOKENS / 2**20:g}M tokens per step, 8 nodes x 8 "
            f"H100, {c.inter.bandwidth_bytes_per_s / 1e9:g} GB/s per GPU between nodes ({inter})",
        )
        r.table(
            f"why_{net}",
            ["why the first plan"],
            [[line] for line in explain(m, c, t, ranked)],
            caption=f"The planner's best plan over all families, {inter}",
        )
        r.add(f"{net}_mfu", ranked[0].time["mfu"], "fraction", f"{inter}: the best plan's MFU")
        r.add(
            f"{net}_tp_share",
            sum(v for k, v in ranked[0].time["parts"].items() if "tensor-parallel" in k) / ranked[0].step_seconds,
            "fraction",
            f"{inter}: the best plan's TP all-reduce share",
        )
        r.add(f"{net}_link", c.inter.bandwidth_bytes_per_s, "B/s", f"{inter}: per GPU, per direction")
        r.add(f"{net}_step", ranked[0].step_seconds, "s", f"{inter}: the best plan's step")
        r.add(f"{net}_tp", ranked[0].plan.tp, "", f"{inter}: the best plan's TP")
        r.add(f"{net}_pp", ranked[0].plan.pp, "", f"{inter}: the best plan's PP")
        r.add(f"{net}_zero", ranked[0].plan.zero, "", f"{inter}: the best plan's ZeRO stage")
    r.add("batch_tokens", t.global_batch_tokens, "tokens", "global batch")
    r.add("states_bytes", 16 * m.params(), "B", "70B model state, 16 bytes per parameter")
    hbm = cluster("H100-SXM").gpu.hbm_bytes
    r.add("min_gpus", math.ceil(16 * m.params() / hbm), "GPUs", "GPUs whose memory holds the model state alone")
    r.claim(
        "a slower network cannot make the best plan faster",
        bests["eth"].step_seconds,
        bests["ndr"].step_seconds,
        relation=">=",
        unit="s",
    )
    r.claim(
        "tensor parallelism stays inside a node on either network",
        max(bests["eth"].plan.tp, bests["ndr"].plan.tp),
        8,
        relation="<=",
    )
    return r


# ---------------------------------------------------------------- practice (c): ZeRO-3 versus tensor parallelism
@experiment(
    "practice-zero3-vs-tp",
    "practice: ZeRO-3/FSDP vs tensor parallelism for 13B on 8 and 16 GPUs: what is sharded, bytes per step, time",
    kind="computed",
)
def practice_zero3_vs_tp(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.planner.cost import data_parallel_exposed, memory, step
    from distlab.sharding.zero import traffic_bytes_per_gpu

    r = Result("practice-zero3-vs-tp", kind="computed")
    rows = []
    for nodes in (1, 2):
        m, c, t = finetune("13B", gpu="H100-SXM", nodes=nodes)
        g = c.gpus
        layouts = {
            "ZeRO-3 / FSDP": Plan(dp=g, zero=3, micro_batch=1, microbatches=t.sequences // g),
            f"TP {g} + sequence parallelism": Plan(tp=g, micro_batch=1, microbatches=t.sequences),
        }
        for name, p in layouts.items():
            mem, s = memory(m, c, t, p), step(m, c, t, p)
            if p.zero == 3:
                sent = traffic_bytes_per_gpu(m.params(), g, 3)["total_bytes"] * p.microbatches
                comm = data_parallel_exposed(m, c, t, p, s["forward_seconds"], s["backward_seconds"])["total"]
                exposed = s["parts"]["data-parallel (exposed)"]
                what = "weights, gradients, optimizer state"
            else:
                message = t.seq * p.micro_batch * m.hidden * 2  # one (s, b, h) bf16 activation
                sent = 4 * m.layers * 2 * (g - 1) / g * message * p.microbatches  # 4 all-reduces a layer, ring
                comm = exposed = sum(v for k, v in s["parts"].items() if "tensor-parallel" in k)
                what = "weights, gradients, optimizer state and activations"
            key = f"{'z3' if p.zero else 'tp'}_{g}"
            rows.append(
                [
                    g,
                    name,
                    what,
                    Quantity(mem["weights"] + mem["gradients"] + mem["optimizer"], "B"),
                    Quantity(mem["activations"], "B"),
                    Quantity(sent, "B"),
                    Quantity(comm, "s"),
                    Quantity(exposed, "s"),
                    Quantity(s["step_seconds"], "s"),
                    f"{s['mfu']:.1%}",
                ]
            )
            r.add(f"{key}_sent", sent, "B", f"{name} on {g} GPUs: bytes each GPU sends per step")
            r.add(f"{key}_comm", comm, "s", f"{name} on {g} GPUs: collective time per step")
            r.add(f"{key}_exposed", exposed, "s", f"{name} on {g} GPUs: exposed")
            r.add(f"{key}_step", s["step_seconds"], "s", f"{name} on {g} GPUs: step")
            r.add(f"{key}_mfu", s["mfu"], "fraction", f"{name} on {g} GPUs: MFU")
            r.add(f"{key}_states", mem["weights"] + mem["gradients"] + mem["optimizer"], "B", f"{name}, {g}: state")
            r.add(f"{key}_activations", mem["activations"], "B", f"{name} on {g} GPUs: activations")
        if nodes == 1:
            n = m.params()
            r.claim(
                "ZeRO-3 sends 3 (N-1)/N x 2Ψ bytes per micro-batch (chapter 6's volume)",
                r.quantities["z3_8_sent"].value / layouts["ZeRO-3 / FSDP"].microbatches,
                3 * 7 / 8 * 2 * n,
                rel_tol=1e-6,
                unit="B",
                formula="(N-1)⌈Ψ/N⌉ per ring phase, three phases",
            )
    r.table(
        "side_by_side",
        [
            "GPUs",
            "layout",
            "sharded",
            "model state per GPU",
            "activations per GPU",
            "bytes sent per GPU per step",
            "collective time",
            "exposed",
            "step",
            "MFU",
        ],
        rows,
        caption="Llama 2 13B fine-tune, 64 sequences of 4096 tokens per step, H100 nodes (NVLink inside, "
        "InfiniBand NDR between); micro-batch 1, no recompute",
    )
    r.claim(
        "across two nodes, TP's all-reduces cost more than ZeRO-3's exposed traffic",
        r.quantities["tp_16_exposed"].value,
        r.quantities["z3_16_exposed"].value,
        relation=">=",
        unit="s",
    )
    return r


# ---------------------------------------------------------------- practice (d): why FlashAttention is faster
@experiment(
    "practice-flash",
    "practice: FlashAttention's extra FLOPs against the HBM traffic it saves, for one "
    "Llama 2 7B layer and for the whole fine-tuning step",
    kind="computed",
)
def practice_flash(device: str) -> Result:
    from distlab.attention.hbm_traffic import flash_backward, flash_forward, standard_backward, standard_forward, total
    from distlab.core.results import Quantity
    from distlab.planner.cost import (
        FLASH_BACKWARD,
        MEMORY_EFFICIENCY,
        attention_efficiency,
        gemm_efficiency,
        layer_work,
    )

    r = Result("practice-flash", kind="computed")
    m, c, t = finetune("7B", gpu="H100-SXM")
    chip = c.gpu
    peak, hbm, ge = chip.peak_flops("bf16"), chip.hbm_bytes_per_s, gemm_efficiency(chip)
    p = Plan(dp=8, zero=3, microbatches=8)
    std = layer_work(m, Training(global_batch_tokens=t.global_batch_tokens, seq=t.seq, attention="standard"), p)
    core = 4 * t.seq * t.seq * m.hidden  # QK^T and PV of one sequence, all heads, no causal skipping
    flops_std, flops_fa = 3 * core, (1 + FLASH_BACKWARD) * core  # backward: 2x, FlashAttention 2.5x (recomputes S)
    bytes_std = 3 * std["scores_bytes"]  # the s x s scores through HBM: forward, then twice that in backward
    t_std = flops_std / (peak * ge) + bytes_std / (hbm * MEMORY_EFFICIENCY)
    t_fa = flops_fa / (peak * attention_efficiency(chip, ge))
    r.add("seq", t.seq, "tokens", "sequence length")
    r.add("flops_std", flops_std, "FLOP", "one layer's attention core, forward + backward, standard")
    r.add("flops_fa", flops_fa, "FLOP", "the same with FlashAttention (its backward recomputes the scores)")
    r.add("flop_ratio", flops_fa / flops_std, "", "FlashAttention / standard FLOPs")
    r.add("bytes_std", bytes_std, "B", "HBM bytes of the s x s scores, softmax and their gradients, one layer")
    r.add("time_std", t_std, "s", "standard: matmuls at the GEMM share of peak + score traffic at the HBM share")
    r.add("time_fa", t_fa, "s", "FlashAttention: its FLOPs at its published share of peak")
    r.add("speedup", t_std / t_fa, "", "standard / FlashAttention time, one layer")
    r.add(
        "score_share",
        (bytes_std / (hbm * MEMORY_EFFICIENCY)) / t_std,
        "fraction",
        "share of standard attention's time spent moving scores",
    )
    n, d = t.seq, m.head_dim  # the flash chapter's tile-by-tile count, per head
    chapter = (
        total(
            flash_forward(n, d, 64 * 1024)
            and [("f", flash_forward(n, d, 64 * 1024)), ("b", flash_backward(n, d, 64 * 1024))]
        ).matmul_flops
        / total(standard_forward(n, d) + standard_backward(n, d)).matmul_flops
    )
    r.claim(
        "extra FLOPs = chapter 8's count from the tiling loops",
        flops_fa / flops_std,
        chapter,
        rel_tol=1e-9,
        formula="(4 + 10) / (4 + 8) = 7/6",
    )
    rows = []
    for attention in ("standard", "flash"):
        tt = Training(global_batch_tokens=t.global_batch_tokens, seq=t.seq, attention=attention)
        e = search(m, c, tt)[0]
        rows.append(
            [
                attention,
                e.plan.label(),
                Quantity(e.memory["activations"], "B"),
                Quantity(e.memory_bytes, "B"),
                Quantity(e.step_seconds, "s"),
                f"{e.time['mfu']:.1%}",
            ]
        )
        r.add(f"{attention}_step", e.step_seconds, "s", f"{attention}: best plan's step")
        r.add(f"{attention}_mfu", e.time["mfu"], "fraction", f"{attention}: best plan's MFU")
        r.add(
            f"{attention}_recompute",
            {"none": 0, "selective": 1, "full": 2}[e.plan.recompute],
            "",
            f"{attention}: recompute (0 none, 1 selective, 2 full)",
        )
    r.table(
        "step",
        ["attention", "best plan", "activations per GPU", "memory per GPU", "step", "MFU"],
        rows,
        caption="Llama 2 7B fine-tune on 8 H100s, best plan found by the planner with each attention",
    )
    r.add(
        "step_speedup",
        r.quantities["standard_step"].value / r.quantities["flash_step"].value,
        "",
        "step time, standard / FlashAttention",
    )
    r.claim(
        "the whole step is faster with FlashAttention",
        r.quantities["flash_step"].value,
        r.quantities["standard_step"].value,
        relation="<=",
        unit="s",
    )
    return r


# ---------------------------------------------------------------- practice (e): a 32-GPU job at 28 % MFU
# The scenario's inputs: what the team runs, and what is wrong around it (each a plausible misconfiguration).
MFU_OBSERVED = 0.28  # the question's premise
TEAM_PLAN = dict(tp=4, pp=2, dp=4, zero=1, micro_batch=2, microbatches=32, recompute="full")  # 13B, 256 sequences
LOADER_WORKERS, LOADER_SECONDS = 1, 10.0  # one DataLoader worker; CPU seconds to tokenize and pack one step's batch
SAVE_EVERY_S, SAVE_BYTES_PER_S = 1800.0, 2e9  # a synchronous save every 30 min to storage writing 2 GB/s
RESTART_S = 600.0  # rescheduling, loading the checkpoint, warming up


@experiment(
    "practice-mfu-budget",
    "practice: a 32-GPU job at 28 % MFU, its losses (plan, bubble, recompute, "
    "kernels, input, stragglers, checkpoints) and the order to fix them",
    kind="computed",
)
def practice_mfu_budget(device: str) -> Result:
    from distlab.planner.config import model
    from distlab.planner.cost import device_bytes, memory, step
    from distlab.throughput.dataloader_starvation import predicted_step_s
    from distlab.throughput.stragglers import JITTER, expected_step_jitter
    from distlab.throughput.young_daly import daly_seconds, llama3_mtbf_seconds, lost_fraction

    r = Result("practice-mfu-budget", kind="computed")
    m = model("13B")
    c = cluster("H100-SXM", nodes=4)
    t = Training(global_batch_tokens=256 * m.seq, seq=m.seq)
    team = Plan(**TEAM_PLAN)
    s_team = step(m, c, t, team)
    best = search(m, c, t)[0]
    ratio = h100_optimism()
    mtbf = llama3_mtbf_seconds() * value("interconnect.Llama3-405B-pretraining.gpus") / c.gpus
    state = 14 * m.params()  # bf16 weights + fp32 master, m, v: what a checkpoint holds
    save_s = state / SAVE_BYTES_PER_S
    step_kernels = s_team["step_seconds"] * ratio  # what H100 kernels really sustain (chapter 13)
    step_loader = predicted_step_s(LOADER_WORKERS, LOADER_SECONDS, step_kernels)
    step_slow = step_loader * expected_step_jitter(c.gpus)  # the step waits for the slowest of the GPUs
    ckpt = 1 - lost_fraction(SAVE_EVERY_S, save_s, mtbf, RESTART_S)
    parts = s_team["parts"]
    layout = [
        ("pipeline bubble", "bubble", "one stage: ZeRO shards the model instead"),
        ("tensor-parallel all-reduces", "tensor-parallel", "TP 1: ZeRO-2 fits without it"),
        ("full recomputation", "recompute", "off: the activations of one sequence fit"),
        ("exposed data-parallel traffic", "data-parallel", "overlap with backward (buckets)"),
    ]
    spent = {name: sum(v for k, v in parts.items() if key in k) for name, key, _ in layout}
    clean = s_team["step_seconds"] - sum(spent.values())  # the team's layout with those four costs removed
    mfu = s_team["mfu"] * s_team["step_seconds"] / clean
    losses, cur = [], clean
    for name, _, fix in layout:
        losses.append((name, cur / (cur + spent[name]), fix))
        cur += spent[name]
    losses += [  # (name, factor on MFU, the fix)
        ("kernels below the model's ceiling (H100)", 1 / ratio, "none by configuration: profile the kernels"),
        ("input pipeline", step_kernels / step_loader, "a second DataLoader worker hides it"),
        (
            f"stragglers: {JITTER:.0%} jitter per GPU, the step waits for the slowest",
            step_loader / step_slow,
            "fewer synchronisations per step; find noisy neighbours",
        ),
        ("checkpoints and failures", ckpt, "asynchronous save at Daly's interval"),
    ]
    rows = []
    r.add("ideal_mfu", mfu, "fraction", "the team's layout without its bubble, TP, recompute and DP costs")
    r.add("best_mfu", best.time["mfu"], "fraction", "the planner's best plan, by the model")
    r.data["best_plan"] = best.plan.label()
    keys = ("bubble", "tp", "recompute", "dp", "kernels", "input", "stragglers", "checkpoints")
    for i, (name, factor, fix) in enumerate(losses):
        r.add(f"factor_{keys[i]}", factor, "", f"factor on MFU: {name}")
        r.add(f"gain_{keys[i]}", 1 / factor, "", f"MFU gain if fixed alone: {name}")
        mfu *= factor
        rows.append([name, f"{factor:.3f}", f"{mfu:.1%}", fix])
        if i == len(layout) - 1:
            r.claim(
                "the layout's four losses take its clean MFU down to the team plan's",
                mfu,
                s_team["mfu"],
                rel_tol=1e-9,
                unit="fraction",
            )
    no_recompute = Plan(**(TEAM_PLAN | {"recompute": "none"}))
    r.claim(
        "the team's layout fits without recomputation",
        device_bytes(memory(m, c, t, no_recompute)),
        c.gpu.hbm_bytes * t.usable_fraction,
        relation="<=",
        unit="B",
    )
    r.table(
        "budget",
        ["loss", "factor on MFU", "MFU after it", "fix"],
        rows,
        caption=f"Llama 2 13B pretraining on 4 nodes x 8 H100, {t.sequences} sequences of {t.seq} per step",
    )
    r.add("final_mfu", mfu, "fraction", "MFU after every loss")
    r.claim(
        "the losses multiply to the observed MFU (the scenario explains the 28 %)",
        mfu,
        MFU_OBSERVED,
        abs_tol=0.02,
        unit="fraction",
        formula="ideal x product of factors",
    )
    gains = sorted(((1 / f, name, fix) for name, f, fix in losses if "kernels" not in name), reverse=True)
    r.table(
        "order",
        ["fix in this order", "MFU gain alone", "how"],
        [[name, f"x{g:.2f}", fix] for g, name, fix in gains],
        caption="Largest gain first",
    )
    for key, v, unit in (
        ("team_mfu_model", s_team["mfu"], "fraction"),
        ("ratio", ratio, ""),
        ("save_s", save_s, "s"),
        ("mtbf_h", mtbf / 3600, "h"),
        ("ckpt_lost", 1 - ckpt, "fraction"),
        ("daly_s", daly_seconds(save_s, mtbf), "s"),
        ("loader_wait", 1 - step_kernels / step_loader, "fraction"),
        ("team_step", step_slow, "s"),
        ("loader_seconds", LOADER_SECONDS, "s"),
        ("save_every_s", SAVE_EVERY_S, "s"),
        ("save_rate", SAVE_BYTES_PER_S, "B/s"),
        ("state_bytes", state, "B"),
    ):
        r.add(key, v, unit, key.replace("_", " "))
    r.table(
        "scenario",
        ["input", "value"],
        [
            ["model, cluster", f"{m.name}, {c.nodes} nodes x {c.gpus_per_node} {c.gpu.name}"],
            ["global batch", f"{t.sequences} sequences of {t.seq} tokens"],
            ["the team's plan", team.label()],
            ["input pipeline", f"{LOADER_WORKERS} DataLoader worker, {LOADER_SECONDS:g} s of CPU work per step"],
            [
                "checkpoints",
                f"synchronous, every {SAVE_EVERY_S / 60:g} min, {state / 1e9:.0f} GB at "
                f"{SAVE_BYTES_PER_S / 1e9:g} GB/s",
            ],
            [
                "failures",
                f"Llama 3's rate per GPU (MTBF {mtbf / 3600:,.0f} h for {c.gpus} GPUs), restarts of "
                f"{RESTART_S / 60:g} min",
            ],
        ],
        caption="The scenario: what the team runs (inputs, not results)",
    )
    r.add("jitter", JITTER, "fraction", "per-GPU step-time jitter (chapter 10)")
    return r


# ---------------------------------------------------------------- practice (f): checkpoint interval of a 70B run
STORAGE_BYTES_PER_S = 100e9  # aggregate write rate of the cluster's parallel file system (an input)
RESTART_70B_S = 900.0  # reschedule 128 nodes, load the checkpoint, warm up (an input)


@experiment(
    "practice-checkpoint",
    "practice: budget a compute-optimal 70B run on 1024 H100s and choose its checkpoint interval",
    kind="computed",
)
def practice_checkpoint(device: str) -> Result:
    from distlab.gpu.flops import flops_per_token
    from distlab.planner.config import model
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS
    from distlab.scaling_laws import optimal_tokens_for, training_flops
    from distlab.throughput.young_daly import (
        daly_seconds,
        expected_wall_seconds,
        llama3_mtbf_seconds,
        lost_fraction,
        optimal_seconds,
        young_seconds,
    )

    r = Result("practice-checkpoint", kind="computed")
    m = model("70B")
    c = cluster("H100-SXM", nodes=128)
    t = Training(global_batch_tokens=PRETRAIN_BATCH_TOKENS, seq=m.seq)
    best = search(m, c, t)[0]
    ratio = h100_optimism()
    tokens = optimal_tokens_for(m.params())
    steps = tokens / t.global_batch_tokens
    step_s = best.step_seconds * ratio
    work = steps * step_s
    r.add("tokens", tokens / 1e12, "trillion tokens", "compute-optimal tokens for 70B (Table 3's rule)")
    r.add("flops", training_flops(m.params(), tokens), "FLOP", "6ND")
    r.add("step_model", best.step_seconds, "s", "the planner's step")
    r.add("step", step_s, "s", "the step divided by the H100 optimism")
    r.add("mfu", best.time["mfu"] / ratio, "fraction", "expected MFU")
    r.add("work_days", work / 86400, "days", "compute time without failures")
    r.add("gpu_hours", work * c.gpus / 3600, "GPU-hours", "GPU-hours")
    per_token = flops_per_token(m.params(), m.layers, m.hidden, t.seq)
    r.claim(
        "GPU-hours = tokens x FLOPs per token / (peak x MFU)",
        work * c.gpus / 3600,
        tokens * per_token / (c.gpu.peak_flops("bf16") * best.time["mfu"] / ratio) / 3600,
        rel_tol=1e-9,
    )
    state = 14 * m.params()
    save = state / STORAGE_BYTES_PER_S
    mtbf = llama3_mtbf_seconds() * value("interconnect.Llama3-405B-pretraining.gpus") / c.gpus
    r.add("state", state, "B", "checkpoint: bf16 weights + fp32 master, m, v")
    r.add("save", save, "s", "one save at the storage's rate")
    r.add("mtbf_h", mtbf / 3600, "h", "MTBF of 1024 GPUs at Llama 3's failure rate per GPU")
    r.add("restart", RESTART_70B_S, "s", "restart time (input)")
    young, daly, exact = young_seconds(save, mtbf), daly_seconds(save, mtbf), optimal_seconds(save, mtbf)
    r.add("young", young, "s", "Young: sqrt(2CM)")
    r.add("daly", daly, "s", "Daly's interval")
    r.claim("Daly's interval is the exact optimum to 2 %", daly, exact, rel_tol=0.02, unit="s")
    rows = []
    for label, tau in (("Daly", daly), ("every 10 minutes", 600.0), ("hourly", 3600.0), ("every 8 hours", 28800.0)):
        lost = lost_fraction(tau, save, mtbf, RESTART_70B_S)
        wall = expected_wall_seconds(work, tau, save, mtbf, RESTART_70B_S)
        rows.append([label, f"{tau / 60:.1f} min", f"{lost:.2%}", f"{wall / 86400:.1f}"])
        key = label.split()[-1].lower()
        r.add(f"lost_{key}", lost, "fraction", f"time lost, {label}")
        r.add(f"wall_{key}", wall / 86400, "days", f"expected wall-clock days, {label}")
    r.table(
        "intervals",
        ["checkpoint", "interval", "time lost", "expected days"],
        rows,
        caption=f"{m.name} on {c.gpus} H100s, {tokens / 1e12:.2f}T tokens: saves of {save:.0f} s, MTBF "
        f"{mtbf / 3600:.1f} h, restarts of {RESTART_70B_S / 60:.0f} min",
    )
    r.claim(
        "Daly's interval loses less than hourly saves",
        r.quantities["lost_daly"].value,
        r.quantities["lost_hourly"].value,
        relation="<=",
        unit="fraction",
    )
    r.claim(
        "Daly's interval loses less than saving every 8 hours",
        r.quantities["lost_daly"].value,
        r.quantities["lost_hours"].value,
        relation="<=",
        unit="fraction",
    )
    return r
