"""Practice 3: ZeRO-3 versus tensor parallelism (experiment practice-zero3-vs-tp)."""

from __future__ import annotations

from dataclasses import replace

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.planner.advice import whiteboard
from distlab.planner.calibration import with_band
from distlab.planner.config import Plan
from distlab.planner.planner_validation import claim_band
from distlab.planner.worked_plan_7b import finetune
from distlab.practice import zero3_vs_tp_checks


# ---------------------------------------------------------------- practice (c): ZeRO-3 versus tensor parallelism
@experiment(
    "practice-zero3-vs-tp",
    "practice: ZeRO-3/FSDP vs tensor parallelism for 13B on 8 and 16 GPUs: what is sharded, bytes per step, time",
    kind="computed",
)
def practice_zero3_vs_tp(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.hardware.collectives import fitted_bus_bandwidth
    from distlab.planner.calibration import mfu_band
    from distlab.planner.cost import memory_per_gpu, step
    from distlab.sharding.zero import traffic_bytes_per_gpu

    r = Result("practice-zero3-vs-tp", kind="computed")
    rows, steps, plans = [], {}, {}
    for nodes in (1, 2):
        m, c, t = finetune("13B", gpu="H100-SXM", nodes=nodes)
        g = c.gpus
        # TP stays inside the node: Llama 2 13B's 40 heads do not split 16 ways, so on two nodes TP 8 takes each
        # node and the nodes are data-parallel replicas (ZeRO-1 across them); chapter 7 prices TP across nodes
        tp = min(g, c.gpus_per_node)
        layouts = {
            "ZeRO-3 / FSDP": Plan(dp=g, zero=3, micro_batch=1, microbatches=t.sequences // g),
            f"TP {tp} + sequence parallelism" + (f" x DP {g // tp}, ZeRO-1" if g > tp else ""): Plan(
                tp=tp, dp=g // tp, zero=1 if g > tp else 0, micro_batch=1, microbatches=t.sequences // (g // tp)
            ),
        }
        runs = [(name, p, t) for name, p in layouts.items()]
        if nodes == 1:  # TP overlap is opt-in in every stack: show TP both ways
            tp_plan = layouts[f"TP {tp} + sequence parallelism"]
            runs.append((f"TP {tp} + sequence parallelism, --tp-overlap", tp_plan, replace(t, tp_overlap=True)))
        for name, p, tt in runs:
            mem, s = memory_per_gpu(m, c, tt, p), step(m, c, tt, p)
            if p.zero == 3:
                sent = traffic_bytes_per_gpu(m.params(), g, 3)["total_bytes"] * p.microbatches
                comm = s.traffic_seconds["dp"]
                exposed = s.breakdown.exposed_dp
                what = "weights, gradients, optimizer state"
            else:
                message = t.seq * p.micro_batch * m.hidden * 2  # one (s, b, h) bf16 activation
                sent = 4 * m.layers * 2 * (tp - 1) / tp * message * p.microbatches  # 4 collectives a layer, ring
                if p.dp > 1:  # and the replicas' ZeRO-1 gradient reduce-scatter and parameter gather, once a step
                    sent += traffic_bytes_per_gpu(-(-m.params() // tp), p.dp, 1)["total_bytes"]
                comm = s.traffic_seconds["tp"] + s.traffic_seconds["dp"]
                exposed = s.breakdown.exposed_tp + s.breakdown.exposed_dp
                what = "weights, gradients, optimizer state and activations"
            key = f"{'z3' if p.zero == 3 else ('tpov' if tt.tp_overlap else 'tp')}_{g}"
            steps[key], plans[key] = s, p  # for the by-hand checks
            lo, hi = mfu_band(s.mfu)
            rows.append(
                [
                    g,
                    name,
                    what,
                    Quantity(mem.model_states, "B"),
                    Quantity(mem.activations, "B"),
                    Quantity(sent, "B"),
                    Quantity(comm, "s"),
                    Quantity(exposed, "s"),
                    Quantity(s.seconds, "s"),
                    with_band(s.mfu),
                ]
            )
            r.add(f"{key}_sent", sent, "B", f"{name} on {g} GPUs: bytes each GPU sends per step")
            r.add(f"{key}_comm", comm, "s", f"{name} on {g} GPUs: collective time per step")
            r.add(f"{key}_exposed", exposed, "s", f"{name} on {g} GPUs: exposed")
            r.add(f"{key}_step", s.seconds, "s", f"{name} on {g} GPUs: step")
            r.add(f"{key}_mfu", s.mfu, "fraction", f"{name} on {g} GPUs: MFU")
            r.add(f"{key}_mfu_low", lo, "fraction", f"{name} on {g} GPUs: its band, low")
            r.add(f"{key}_mfu_high", hi, "fraction", f"{name} on {g} GPUs: its band, high")
            r.add(f"{key}_states", mem.model_states, "B", f"{name}, {g}: state")
            r.add(f"{key}_activations", mem.activations, "B", f"{name} on {g} GPUs: activations")
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
            "MFU (band)",
        ],
        rows,
        caption="Llama 2 13B fine-tune, 64 sequences of 4096 tokens per step, H100 nodes (NVLink inside, "
        "InfiniBand NDR between); micro-batch 1, no recompute; TP collectives on the critical path unless the row "
        "says --tp-overlap (opt-in in every stack); on two nodes TP 8 stays in each node and the nodes are ZeRO-1 "
        "replicas (computed)",
    )
    r.claim(
        "TP's collectives send more bytes than ZeRO-3's on one node (activations, not weights, at this length)",
        r.quantities["tp_8_sent"].value,
        r.quantities["z3_8_sent"].value,
        relation=">=",
        unit="B",
    )
    m, c, t = finetune("13B", gpu="H100-SXM", nodes=1)
    by_hand = 4 * m.layers * 2 * 7 / 8 * (4096 * 5120 * 2) * 64  # 40 layers, h = 5120, 64 micro-batches of one
    r.claim(
        "TP 8 sends 4L x 2(t-1)/t x s h x 2 bytes per micro-batch (by hand)",
        r.quantities["tp_8_sent"].value,
        by_hand,
        rel_tol=1e-12,
        unit="B",
    )
    _whiteboard(r, m, c, t)
    plans["gb_z3_64"] = _global_batch(r)
    r.claim(
        "'ZeRO-3 wins on one node' (the answer): its step is shorter than TP 8's, with or without overlap",
        r.quantities["z3_8_step"].value,
        min(r.quantities["tp_8_step"].value, r.quantities["tpov_8_step"].value),
        relation="<=",
        unit="s",
    )
    claim_band(r)  # the MFU bands this page quotes
    zero3_vs_tp_checks.claims(r, steps, plans, bus=fitted_bus_bandwidth(c.intra))
    return r


def _wb(r: Result, name: str, exact: float, unit: str, what: str) -> float:
    rounded = whiteboard(exact)
    r.add(f"wb_{name}", rounded, unit, f"whiteboard: {what} (two significant figures)")
    r.claim(f"whiteboard {what}: the rounding is within 5 % of the exact value", rounded, exact, rel_tol=0.05)
    return exact


def _whiteboard(r: Result, m, c, t) -> None:
    """Per micro-batch on one node: ZeRO-3's bytes and TP's, each against the compute it must hide behind, at the
    NVLink bus bandwidth and a published MFU."""
    from distlab.core.facts import value
    from distlab.hardware.collectives import fitted_bus_bandwidth

    n, g = m.params(), c.gpus
    bus = fitted_bus_bandwidth(c.intra)
    mfu = value("megatron_runs.megatron-core-gpt3-96.mfu")
    rate = c.gpu.peak_flops("bf16") * mfu
    r.add("wb_bus", whiteboard(bus), "B/s", "NVLink bus bandwidth (chapter 9's fit), two significant figures")
    r.add("wb_mfu", mfu, "fraction", "a published H100 MFU (Megatron-Core's README)")
    z3 = _wb(r, "z3_bytes", 3 * 2 * n * (g - 1) / g, "B", "ZeRO-3 bytes per GPU per micro-batch, 3 x 2N (N-1)/N")
    z3_compute = _wb(r, "z3_compute", 6 * n * t.seq / rate, "s", "one sequence's 6N s FLOPs on one GPU")
    _wb(r, "z3_comm", z3 / bus, "s", "ZeRO-3's bytes at the bus bandwidth")
    tp_bytes = _wb(
        r,
        "tp_bytes",
        4 * m.layers * 2 * (g - 1) / g * t.seq * m.hidden * 2,
        "B",
        "TP bytes per GPU per micro-batch, 4L x 2(t-1)/t x s h x 2",
    )
    tp_compute = _wb(r, "tp_compute", 6 * n * t.seq / g / rate, "s", "one sequence's FLOPs split t ways")
    _wb(r, "tp_comm", tp_bytes / bus, "s", "TP's bytes at the bus bandwidth")
    _wb(r, "z3_ratio", z3 / bus / z3_compute, "", "ZeRO-3 comm / compute")
    _wb(r, "tp_ratio", tp_bytes / bus / tp_compute, "", "TP comm / compute")
    r.claim("whiteboard: ZeRO-3's gathers fit under its compute (they can hide)", z3 / bus, z3_compute, relation="<=")
    r.claim(
        "whiteboard: TP's collectives are a larger share of their compute than ZeRO-3's",
        tp_bytes / bus / tp_compute,
        z3 / bus / z3_compute,
        relation=">=",
    )


def _global_batch(r: Result) -> Plan:
    """The global-batch argument for TP at scale: data parallelism needs at least one sequence per replica (and
    ZeRO-3 several micro-batches' worth of compute to hide behind), so the global batch caps pure FSDP's GPUs;
    TP t multiplies that cap by t. The 13B fine-tune's 64 sequences, and Llama 2's 4M-token pretraining batch."""
    from distlab.planner.cost import step
    from distlab.planner.search import PRETRAIN_BATCH_TOKENS, NothingFits, search

    m, c, t = finetune("13B", gpu="H100-SXM", nodes=8)
    seqs = t.sequences
    r.add("gb_sequences", seqs, "sequences", "the fine-tune's global batch")
    r.add("gb_fsdp_max_gpus", seqs, "GPUs", "pure FSDP: at most one GPU per sequence")
    r.add("gb_tp8_max_gpus", 8 * seqs, "GPUs", "TP 8 x FSDP: eight GPUs per sequence")
    r.add("gb_pretrain_sequences", PRETRAIN_BATCH_TOKENS // 4096, "sequences", "Llama 2's 4M-token batch")
    r.add("gb_pretrain_tp8_max_gpus", 8 * (PRETRAIN_BATCH_TOKENS // 4096), "GPUs", "... TP 8 x FSDP's cap")
    g = c.gpus
    z3_plan = Plan(dp=g, zero=3, micro_batch=1, microbatches=seqs // g)
    z3 = step(m, c, t, z3_plan)
    r.add("gb_gpus", g, "GPUs", "the 13B fine-tune on 8 nodes")
    r.add("gb_z3_per_gpu", seqs // g, "sequences", "pure FSDP on 64 GPUs: sequences per GPU per step")
    r.add("gb_z3_step", z3.seconds, "s", "pure FSDP on 64 GPUs: step")
    r.claim("pure FSDP on 64 GPUs: one sequence per GPU per step, one micro-batch", seqs // g, 1)
    m2, c2, t2 = finetune("13B", gpu="H100-SXM", nodes=16)
    try:
        search(m2, c2, t2, where=lambda p: p.tp == 1 and p.pp == 1 and p.cp == 1)
        pure = 1
    except NothingFits:
        pure = 0
    r.add("gb_big_gpus", c2.gpus, "GPUs", "two more racks: 16 nodes")
    r.claim("128 GPUs, 64 sequences: no pure data-parallel plan exists (a replica needs a whole sequence)", pure, 0)
    best = search(m2, c2, t2)[0]
    r.add("gb_big_tp", best.plan.tp, "", "128 GPUs: the recommended plan's TP")
    r.add("gb_big_pp", best.plan.pp, "", "... its PP")
    r.add("gb_big_dp", best.plan.dp, "", "... its DP")
    r.add("gb_big_step", best.step_seconds, "s", "... its step")
    r.add("gb_big_speedup", z3.seconds / best.step_seconds, "", "64-GPU FSDP step / 128-GPU recommended step")
    r.claim(
        "128 GPUs: the recommended plan splits the model (TP or PP) to use them",
        best.plan.tp * best.plan.pp,
        2,
        relation=">=",
    )
    return z3_plan
