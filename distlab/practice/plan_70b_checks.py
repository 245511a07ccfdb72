"""Practice 2's numbers worked by hand: Llama 2 70B's parameters counted from its config, the whiteboard chain (16Ψ,
TP 8 in a node, DP = 64 / (TP x PP), the 1F1B and interleaved bubbles, ZeRO-1's bytes on the wire, a step at
Megatron-Core's published MFU), the plan families' rows against their family's name and their plan's own time
breakdown, the links from the data files' Gb/s, all typed out here, never taken from the experiment's helpers.
"""

from __future__ import annotations

import math
import re

from distlab.core.facts import value
from distlab.core.results import Result
from distlab.practice.checks import pairs_claim, printed_claim, rounded_claim

# Llama 2 70B's config.json: 80 layers, hidden 8192, 64 heads and 8 KV heads of 128, SwiGLU 28672, vocabulary 32000,
# untied embedding and head, RMSNorm weights only; sequence 4096
H, KV, FFN, LAYERS, VOCAB, SEQ = 8192, 8 * 128, 28672, 80, 32000, 4096
PARAMS_70B = LAYERS * (2 * H * H + 2 * H * KV + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H  # 68,976,648,192
GPUS, PER_NODE = 64, 8  # the question's 64 GPUs: 8 DGX H100 nodes of 8
BATCH_TOKENS = 4 * 2**20  # Llama 2's global batch, 4M tokens
STATE = 16  # bytes per parameter, mixed-precision AdamW
ACTS = 34  # bytes per token per hidden unit per layer with FlashAttention (chapter 3); sequence parallel / TP
FAMILY = {  # what each family's name says: TP, pipelined?, ZeRO stage
    "FSDP only (TP 1)": (1, False, 3),
    "TP 2 x FSDP": (2, False, 3),
    "TP 8 x FSDP": (8, False, 3),
    "TP 8 x PP x DP, ZeRO-1 (Megatron)": (8, True, 1),
    "TP 4 x PP x DP, ZeRO-1": (4, True, 1),
}


def _family_best(name: str, m, c, t) -> str:
    """The best plan's label under the family `name` states (FAMILY: TP, pipelined or not, ZeRO stage, no offload),
    or 'nothing fits'."""
    from distlab.planner.search import NothingFits, search

    tp, pipelined, zero = FAMILY[name]
    where = lambda p: p.tp == tp and (p.pp > 1) == pipelined and p.zero == zero and p.offload == "none"
    try:
        return search(m, c, t, where=where)[0].plan.label()
    except NothingFits:
        return "nothing fits"


def _whiteboard(q: dict, usable: float) -> dict[str, float]:
    """The whiteboard's exact values by hand, at the canonical layout's PP, micro-batch and chunks (planner inputs)."""
    n, pp, b, v = PARAMS_70B, q["wb_pp"], q["wb_micro_batch"], q["wb_v"]
    dp = GPUS // (PER_NODE * pp)
    per_gpu = (4 + 12 / dp) * n / (PER_NODE * pp)  # ZeRO-1 (distributed optimizer)
    acts = ACTS * SEQ * H * LAYERS / PER_NODE
    m = BATCH_TOKENS // SEQ // dp // b
    dp_bytes = 2 * (dp - 1) / dp * 2 * n / (PER_NODE * pp)  # reduce-scatter bf16 gradients, all-gather weights
    nic = value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    step = (6 * n + 12 * LAYERS * H * SEQ) * BATCH_TOKENS / (GPUS * peak * q["wb_published_mfu"])
    total = per_gpu + b * acts + 3 * value("planner.memory-reserve.nccl_per_communicator_gb") * 1e9
    return {
        "states": STATE * n,
        "states_gpus": STATE * n / usable,
        "node_bytes": PER_NODE * usable,
        "weights_tp": 2 * n / PER_NODE,
        "states_per_gpu": per_gpu,
        "acts_per_sequence": acts,
        "bubble": (pp - 1) / (m + pp - 1),
        "bubble_interleaved": (pp - 1) / v / (m + (pp - 1) / v),
        "dp_bytes": dp_bytes,
        "dp_seconds": dp_bytes / nic,
        "step": step,
        "dp_share": dp_bytes / nic / step,
        "total": total,
        "free": 1 - total / usable,
    }


def claims(r: Result, plans: dict, setups: dict, *, usable: float) -> None:
    """Every number practice 2 computes itself, against the hand-worked values. `plans` maps each families row
    ("ndr:<family>") and each answer ("ndr_mc", ...) to the planner's estimate it shows; `setups` each network's (model,
    cluster, training); `usable` is one H100's usable bytes (chapter 12's)."""
    q = {k: v.value for k, v in r.quantities.items()}
    exact = _whiteboard(q, usable)
    rounded_claim(r, "whiteboard by hand", {k: (q[f"wb_{k}"], v) for k, v in exact.items()})
    dp = GPUS // (PER_NODE * q["wb_pp"])
    pairs = {
        "wb_tp": (q["wb_tp"], PER_NODE),
        "wb_dp": (q["wb_dp"], dp),
        "wb_sequences": (q["wb_sequences"], BATCH_TOKENS / SEQ),
        "wb_per_replica": (q["wb_per_replica"], BATCH_TOKENS / SEQ / dp),
        "wb_m": (q["wb_m"], BATCH_TOKENS / SEQ / dp / q["wb_micro_batch"]),
        "wb_over_planner": (q["wb_over_planner"], exact["step"] / q["can_step"]),
        "batch_tokens": (q["batch_tokens"], BATCH_TOKENS),
        "states_bytes": (q["states_bytes"], STATE * PARAMS_70B),
        "min_gpus": (q["min_gpus"], math.ceil(STATE * PARAMS_70B / usable)),
        "ndr_link": (q["ndr_link"], value("interconnect.InfiniBand-NDR.gbits_per_s_per_direction") * 1e9 / 8),
        "eth_link": (q["eth_link"], value("interconnect.Ethernet-100G.gbits_per_s_per_direction") * 1e9 / 8),
        "fsdptp_slower": (q["fsdptp_slower"], q["fsdptp_step"] / q["ndr_mc_step"] - 1),
    }
    for key in ("ndr_mc", "ndr_any", "eth_mc"):
        e = plans[key]
        pairs[f"{key}_tp_share"] = (q[f"{key}_tp_share"], e.time.breakdown.exposed_tp / e.step_seconds)
        pairs[f"{key}_step"] = (q[f"{key}_step"], e.step_seconds)
    tp8 = plans["ndr:TP 8 x FSDP"]
    pairs["tp8_tp_share"] = (q["tp8_tp_share"], tp8.time.breakdown.exposed_tp / tp8.step_seconds)
    pairs["tp8_tp_traffic_share"] = (q["tp8_tp_traffic_share"], tp8.time.traffic_seconds["tp"] / tp8.step_seconds)
    pairs_claim(
        r,
        "70B by hand: DP = 64 / (8 x PP), m, the batch, 16Ψ, the fewest GPUs, links, shares of the step",
        pairs,
        formula="Ψ = L(2h² + 2h·kv + 3h·ffn + 2h) + 2Vh + h; links = Gb/s / 8",
    )
    cells, names = [], []
    for net, link in (("ndr", "InfiniBand-NDR"), ("eth", "Ethernet-100G")):
        for row in r.tables[f"families_{net}"].rows:
            e = plans.get(f"{net}:{row[0]}")
            if e is None:
                continue
            tp, pp, zero = (int(x) for x in re.match(r"TP (\d+) x PP (\d+) x DP \d+, ZeRO-(\d)", row[1]).groups())
            want_tp, pipelined, want_zero = FAMILY[row[0]]
            names.append(int(tp == want_tp and (pp > 1) == pipelined and zero == want_zero and "offload" not in row[1]))
            bd = e.time.breakdown
            cells += [(row[3], 100 * e.headroom_fraction), (row[5], 100 * e.time.mfu)]
            cells += [(row[6], 100 * bd.exposed_tp / e.step_seconds), (row[7], 100 * bd.bubble / e.step_seconds)]
            cells += [(row[8], 100 * bd.exposed_dp / e.step_seconds)]
        found = re.search(
            r"(\d+)M tokens per step, (\d+) nodes x (\d+) H100, ([\d.]+) GB/s per GPU",
            r.tables[f"families_{net}"].caption,
        )
        refs = (
            BATCH_TOKENS / 2**20,
            GPUS / PER_NODE,
            PER_NODE,
            value(f"interconnect.{link}.gbits_per_s_per_direction") / 8,
        )
        cells += list(zip(found.groups(), refs, strict=True))
    r.claim("families tables: every row's plan is of the family its name states (TP, pipeline, ZeRO)", min(names), 1)
    r.claim(
        "families tables: each row is the planner's best plan under its family's name, the filter typed from the name",
        sum(row[1] != _family_best(row[0], *setups[net]) for net in setups for row in r.tables[f"families_{net}"].rows),
        0,
    )
    f = plans["fsdptp"].plan  # the follow-up's "FSDP + TP (torchtitan, no pipeline)"
    r.claim(
        "FSDP + TP: TP > 1, no pipeline, ZeRO-3, no offload, as the follow-up says",
        int(f.tp > 1 and f.pp == 1 and f.zero == 3 and f.offload == "none"),
        1,
    )
    sizes = [e.plan.tp * e.plan.pp * e.plan.dp * e.plan.cp for e in plans.values()]
    r.claim(
        "every plan shown runs on the question's 64 GPUs (NVL72: 64 of its B200s): largest |TP x PP x DP x CP - 64|",
        max(abs(size - GPUS) for size in sizes),
        0,
    )
    printed_claim(r, "families tables by hand: headroom, MFU, exposed TP, bubble and DP shares, captions", cells)
