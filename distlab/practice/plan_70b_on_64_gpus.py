"""Practice 2: a plan for 70B on 64 GPUs (experiment practice-70b)."""

from __future__ import annotations

import math

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.memory.model_states import add_state_bytes, bytes_per_param
from distlab.planner.calibration import with_band
from distlab.planner.config import Training, cluster
from distlab.planner.planner_validation import claim_band
from distlab.planner.search import search

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
            b = e.time.breakdown
            sh = lambda part, e=e: getattr(e.time.breakdown, part) / e.step_seconds
            rows.append(
                [
                    fam,
                    e.plan.label(),
                    Quantity(e.memory_bytes, "B"),
                    Quantity(e.step_seconds, "s"),
                    with_band(e.time.mfu),
                    f"{sh('exposed_tp'):.1%}",
                    f"{sh('bubble'):.1%}",
                    f"{sh('exposed_dp'):.1%}",
                ]
            )
            if net == "ndr" and fam.startswith("TP 8 x FSDP"):
                r.add("tp8_tp_share", sh("exposed_tp"), "fraction", "TP 8 x FSDP: exposed TP share of the step")
                r.add(
                    "tp8_tp_traffic_share",
                    e.time.traffic_seconds["tp"] / e.step_seconds,
                    "fraction",
                    "TP 8 x FSDP: TP collective time, hidden or not, over the step",
                )
                del b
        ranked = search(m, c, t)
        bests[net] = ranked[0]
        r.table(
            f"families_{net}",
            [
                "family",
                "its best plan",
                "memory per GPU",
                "step",
                "MFU (band)",
                "TP exposed",
                "bubble",
                "data-parallel exposed",
            ],
            rows,
            caption=f"Llama 2 70B pretraining, {PRETRAIN_BATCH_TOKENS / 2**20:g}M tokens per step, 8 nodes x 8 "
            f"H100, {c.inter.bandwidth_bytes_per_s / 1e9:g} GB/s per GPU between nodes ({inter}; computed)",
        )
        r.table(
            f"why_{net}",
            ["why the first plan"],
            [[line] for line in explain(m, c, t, ranked)],
            caption=f"The planner's best plan over all families, {inter}",
        )
        from distlab.planner.calibration import mfu_band

        lo, hi = mfu_band(ranked[0].time.mfu)
        r.add(f"{net}_mfu", ranked[0].time.mfu, "fraction", f"{inter}: the best plan's MFU by the model")
        r.add(f"{net}_mfu_low", lo, "fraction", f"{inter}: the low end of its band")
        r.add(f"{net}_mfu_high", hi, "fraction", f"{inter}: the high end of its band")
        r.add(
            f"{net}_tp_share",
            ranked[0].time.breakdown.exposed_tp / ranked[0].step_seconds,
            "fraction",
            f"{inter}: the best plan's exposed TP share",
        )
        r.add(f"{net}_link", c.inter.bandwidth_bytes_per_s, "B/s", f"{inter}: per GPU, per direction")
        r.add(f"{net}_step", ranked[0].step_seconds, "s", f"{inter}: the best plan's step")
        r.add(f"{net}_tp", ranked[0].plan.tp, "", f"{inter}: the best plan's TP")
        r.add(f"{net}_pp", ranked[0].plan.pp, "", f"{inter}: the best plan's PP")
        r.add(f"{net}_zero", ranked[0].plan.zero, "", f"{inter}: the best plan's ZeRO stage")
    r.add("batch_tokens", t.global_batch_tokens, "tokens", "global batch")
    add_state_bytes(r)  # the bytes per parameter the page quotes, claimed
    r.add("states_bytes", bytes_per_param() * m.params(), "B", "70B model state at the default bytes per parameter")
    from distlab.planner.config import usable_bytes

    hbm = usable_bytes(cluster("H100-SXM").gpu)
    r.add("min_gpus", math.ceil(bytes_per_param() * m.params() / hbm), "GPUs", "GPUs whose memory holds the state")
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
    claim_band(r)  # the MFU bands this page quotes
    return r
