"""Practice 3's numbers worked by hand: the bytes each layout sends (ZeRO-3's three ring phases per micro-batch of
Llama 2 13B, TP's four collectives per layer of one (s, h) activation, the replicas' ZeRO-1 phases), the collective
time and MFU of each row from its step's parts, the whiteboard per micro-batch and the global-batch caps, all typed
out here, never taken from the experiment's helpers or distlab.sharding.zero.
"""

from __future__ import annotations

from distlab.core.facts import value
from distlab.core.results import Result
from distlab.practice.checks import pairs_claim, printed_claim, rounded_claim

# Llama 2 13B (its config.json): 40 layers, hidden 5120, SwiGLU 13824, vocabulary 32000, untied; sequence 4096
H, FFN, LAYERS, VOCAB, SEQ = 5120, 13824, 40, 32000, 4096
PARAMS_13B = LAYERS * (4 * H * H + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H  # 13,015,864,320
SEQUENCES = 64  # Llama 2-Chat's SFT batch: 64 sequences a step
PER_NODE = 8  # GPUs in an H100 node
PRETRAIN_SEQUENCES = 4 * 2**20 // SEQ  # Llama 2's 4M-token pretraining batch


def _ring(elements: int, gpus: int) -> int:
    """Bytes one GPU sends in one ring reduce-scatter or all-gather of bf16 `elements`: (N - 1) ⌈E/N⌉ x 2."""
    return (gpus - 1) * -(-elements // gpus) * 2


def sent_by_hand(key: str, gpus: int) -> float:
    """Bytes a GPU sends per step in row `key` ("z3", "tp", "tpov") on `gpus` GPUs, micro-batch 1."""
    if key == "z3":  # all-gather forward, all-gather backward, reduce-scatter gradients, every micro-batch
        return 3 * _ring(PARAMS_13B, gpus) * (SEQUENCES // gpus)
    tp = min(gpus, PER_NODE)
    dp = gpus // tp
    sent = 4 * LAYERS * 2 * (tp - 1) / tp * SEQ * H * 2 * (SEQUENCES // dp)  # 2 all-gathers + 2 reduce-scatters
    if dp > 1:  # ZeRO-1 across the replicas: one reduce-scatter and one all-gather of the TP shard a step
        sent += 2 * _ring(-(-PARAMS_13B // tp), dp)
    return sent


def claims(r: Result, steps: dict, plans: dict, *, bus: float) -> None:
    """Every number practice 3 computes itself. `steps` maps each row's key ("z3_8", ...) to the planner's step it
    prices, `plans` each row's plan (and "gb_z3_64", pure FSDP on 64 GPUs); `bus` is NVLink 4's fitted bus
    bandwidth (chapter 9's)."""
    q = {k: v.value for k, v in r.quantities.items()}
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    pairs = {}
    for key, s in steps.items():
        kind, g = key.split("_")
        g = int(g)
        parts = ("dp",) if kind == "z3" else ("tp", "dp")
        pairs[f"{key}_sent"] = (q[f"{key}_sent"], sent_by_hand(kind, g))
        pairs[f"{key}_comm"] = (q[f"{key}_comm"], sum(s.traffic_seconds[p] for p in parts))
        exposed = sum(getattr(s.breakdown, f"exposed_{p}") for p in parts)
        pairs[f"{key}_exposed"] = (q[f"{key}_exposed"], exposed)
        flops = (6 * PARAMS_13B + 12 * LAYERS * H * SEQ) * SEQ * SEQUENCES  # PaLM's count per token x tokens
        pairs[f"{key}_mfu"] = (q[f"{key}_mfu"], flops / (g * peak * q[f"{key}_step"]))
    pairs.update(
        {
            "gb_sequences": (q["gb_sequences"], SEQUENCES),
            "gb_fsdp_max_gpus": (q["gb_fsdp_max_gpus"], SEQUENCES),
            "gb_tp8_max_gpus": (q["gb_tp8_max_gpus"], 8 * SEQUENCES),
            "gb_pretrain_sequences": (q["gb_pretrain_sequences"], PRETRAIN_SEQUENCES),
            "gb_pretrain_tp8_max_gpus": (q["gb_pretrain_tp8_max_gpus"], 8 * PRETRAIN_SEQUENCES),
            "gb_gpus": (q["gb_gpus"], 8 * PER_NODE),
            "gb_z3_per_gpu": (q["gb_z3_per_gpu"], SEQUENCES / (8 * PER_NODE)),
            "gb_big_gpus": (q["gb_big_gpus"], 16 * PER_NODE),
            "gb_big_speedup": (q["gb_big_speedup"], q["gb_z3_step"] / q["gb_big_step"]),
        }
    )
    pairs_claim(
        r,
        "13B on 8 and 16 H100s by hand: bytes sent, collective and exposed time, MFU, the global batch's caps",
        pairs,
        formula="ZeRO-3: 3 (N-1)⌈Ψ/N⌉ x 2 B; TP: 4L x 2(t-1)/t x s h x 2 B; MFU = FLOPs / (GPUs x peak x step)",
    )
    g, mfu = PER_NODE, q["wb_mfu"]
    rate = peak * mfu
    z3, tp = 3 * 2 * PARAMS_13B * (g - 1) / g, 4 * LAYERS * 2 * (g - 1) / g * SEQ * H * 2
    z3_compute = 6 * PARAMS_13B * SEQ / rate
    exact = {
        "bus": bus,
        "z3_bytes": z3,
        "z3_compute": z3_compute,
        "z3_comm": z3 / bus,
        "tp_bytes": tp,
        "tp_compute": z3_compute / g,
        "tp_comm": tp / bus,
        "z3_ratio": z3 / bus / z3_compute,
        "tp_ratio": tp / bus / (z3_compute / g),
    }
    rounded_claim(
        r, "whiteboard by hand, per micro-batch on one node", {k: (q[f"wb_{k}"], v) for k, v in exact.items()}
    )
    cells = []
    for row in r.tables["side_by_side"].rows:
        key = ("z3" if row[1].startswith("ZeRO-3") else ("tpov" if "overlap" in row[1] else "tp")) + f"_{row[0]}"
        cells.append((row[9], 100 * q[f"{key}_mfu"]))
        if row[1].startswith("TP"):
            cells.append((row[1].split()[1], min(row[0], PER_NODE)))
        if " x DP " in row[1]:  # the replicas across nodes: GPUs / 8
            cells.append((row[1].split(" x DP ")[1], row[0] / PER_NODE))
    cap = r.tables["side_by_side"].caption
    cells += [(cap.split(" sequences of ")[0].split(", ")[-1], SEQUENCES), (cap.split(" sequences of ")[1], SEQ)]
    printed_claim(r, "side-by-side table by hand: MFU, TP degree, the caption's batch", cells)
    layouts = []  # (GPUs, sequences a step, micro-batch) of each plan, against what the page says it runs
    for key, p in plans.items():
        g = int(key.split("_")[-1])
        layouts.append((p.tp * p.pp * p.dp, g))
        layouts += [(p.dp * p.micro_batch * p.microbatches, SEQUENCES), (p.micro_batch, 1)]
        layouts.append((p.tp, min(g, PER_NODE) if key.startswith("tp") else 1))
        layouts.append((p.zero, (1 if g > PER_NODE else 0) if key.startswith("tp") else 3))  # "ZeRO-1 replicas"
    r.claim(
        "each plan: its row's GPUs, 64 sequences a step at micro-batch 1, TP in a node, its ZeRO stage (largest gap)",
        max(abs(a - b) for a, b in layouts),
        0,
    )
    rows = sorted({row[0] for row in r.tables["side_by_side"].rows})
    r.claim(
        "the rows are the question's one and two nodes of 8 H100s (largest gap)",
        max(abs(a - b) for a, b in zip(rows, (8, 16), strict=True)),
        0,
    )
