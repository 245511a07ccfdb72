"""Practice 3: ZeRO-3 versus tensor parallelism (experiment practice-zero3-vs-tp)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.planner.calibration import with_band
from distlab.planner.config import Plan
from distlab.planner.planner_validation import claim_band
from distlab.planner.worked_plan_7b import finetune


# ---------------------------------------------------------------- practice (c): ZeRO-3 versus tensor parallelism
@experiment(
    "practice-zero3-vs-tp",
    "practice: ZeRO-3/FSDP vs tensor parallelism for 13B on 8 and 16 GPUs: what is sharded, bytes per step, time",
    kind="computed",
)
def practice_zero3_vs_tp(device: str) -> Result:
    from distlab.core.results import Quantity
    from distlab.planner.calibration import mfu_band
    from distlab.planner.cost import memory_per_gpu, step
    from distlab.sharding.zero import traffic_bytes_per_gpu

    r = Result("practice-zero3-vs-tp", kind="computed")
    rows = []
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
        for name, p in layouts.items():
            mem, s = memory_per_gpu(m, c, t, p), step(m, c, t, p)
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
            key = f"{'z3' if p.zero == 3 else 'tp'}_{g}"
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
        "InfiniBand NDR between); micro-batch 1, no recompute; TP collectives overlapped with their GEMMs; on two "
        "nodes TP 8 stays in each node and the nodes are ZeRO-1 replicas (computed)",
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
    claim_band(r)  # the MFU bands this page quotes
    return r
