"""Practice 1's numbers worked by hand: Llama 2 13B's parameters counted from its config, the whiteboard chain (16Ψ,
what each ZeRO stage leaves on 8 GPUs, 34 s h L, the budget less the headroom rule, a step at a published MFU), the
cheaper fine-tunes' bytes from the papers' bit counts, and the fine-tune hours of the fewer-GPUs table, all typed
out here and never taken from the experiment's helpers or distlab/practice/peft_bytes.py.
"""

from __future__ import annotations

import re

from distlab.core.facts import value
from distlab.core.results import Result
from distlab.practice.checks import pairs_claim, printed_claim, rounded_claim

# Llama 2 13B's config.json (Touvron et al. 2023): 40 layers, hidden 5120, SwiGLU 13824, 40 heads (no GQA),
# vocabulary 32000, untied embedding and head, RMSNorm weights only; sequence 4096
H, FFN, LAYERS, VOCAB, SEQ = 5120, 13824, 40, 32000, 4096
PARAMS_13B = LAYERS * (4 * H * H + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H  # 13,015,864,320
GPUS = 8  # the question's one node of eight GPUs
BATCH_TOKENS = 64 * SEQ  # Llama 2-Chat's SFT batch: 64 sequences of 4096 tokens
STATE = 2 + 2 + 4 + 4 + 4  # bytes per parameter: bf16 weights and gradients, fp32 master, m and v
ACTS = 34  # bytes per token per hidden unit per layer with FlashAttention, b = 1, no TP (chapter 3)


def _by_hand(rank: int) -> dict[str, float]:
    """The model state of each fine-tune, in bytes, from the papers' bit counts (peft_bytes.toml's sources)."""
    lora = LAYERS * rank * (4 * 2 * H + 3 * (H + FFN))  # r(d + k) for q, k, v, o (h x h) and gate, up, down
    nf4_bits = 4 + 8 / 64 + 32 / (64 * 256)  # QLoRA section 3: NF4, 8-bit constants per 64, 32-bit per 256 blocks
    adam8bit = 2 + 2 + 4 + 2 * (8 + 32 / 2048) / 8  # 8-bit Adam: two 8-bit states, a 32-bit constant per 2048
    return {
        "lora_params": lora,
        "nf4_bits": nf4_bits,
        "adam8bit_bytes": adam8bit,
        "full": STATE * PARAMS_13B,
        "full_adam8bit": adam8bit * PARAMS_13B,
        "lora": 2 * PARAMS_13B + STATE * lora,  # frozen bf16 base, adapters trained in mixed precision
        "qlora": nf4_bits / 8 * PARAMS_13B + STATE * lora,
    }


def claims(r: Result, *, usable: float, rank: int) -> None:
    """Every number practice 1 shows from its own module, against the hand-worked values. `usable` is one GPU's
    usable bytes (chapter 12's, printed on the page as the plan's budget); `rank` is LoRA's rank, an input the page
    states."""
    q = {k: v.value for k, v in r.quantities.items()}
    n = PARAMS_13B
    rule = q["rec_rule"]  # the headroom rule the page prints
    nccl = value("planner.memory-reserve.nccl_per_communicator_gb") * 1e9  # one data-parallel communicator
    zero = {1: (4 + 12 / GPUS) * n, 2: (2 + 14 / GPUS) * n, 3: STATE * n / GPUS}
    acts = ACTS * SEQ * H * LAYERS
    peak = value("gpus.A100-SXM-80GB.bf16_dense_tflops") * 1e12
    step = (6 * n + 12 * LAYERS * H * SEQ) * BATCH_TOKENS / (GPUS * peak * q["wb_published_mfu"])
    exact = {
        "states": STATE * n,
        "states_gpus": STATE * n / usable,
        **{f"zero{z}": v for z, v in zero.items()},
        "acts": acts,
        "limit": (1 - rule) * usable,
        "zero2_total": zero[2] + acts + nccl,
        "zero2_free": 1 - (zero[2] + acts + nccl) / usable,
        "zero3_total": zero[3] + acts + nccl,
        "zero3_free": 1 - (zero[3] + acts + nccl) / usable,
        "step": step,
    }
    rounded_claim(r, "whiteboard by hand", {k: (q[f"wb_{k}"], v) for k, v in exact.items()})
    hand = _by_hand(rank)
    pairs = {
        "params": (q["params"] * 1e9, n),
        "states_bytes": (q["states_bytes"], STATE * n),
        "lora_params": (q["lora_params"], hand["lora_params"]),
        "nf4_bits": (q["nf4_bits"], hand["nf4_bits"]),
        "adam8bit_bytes": (q["adam8bit_bytes"], hand["adam8bit_bytes"]),
    }
    for method in ("full", "full_adam8bit", "lora", "qlora"):
        pairs[f"peft_{method}"] = (q[f"peft_{method}"], hand[method])
        pairs[f"peft_{method}_gpus"] = (q[f"peft_{method}_gpus"], hand[method] / usable)
    mean = value("sft_data.llama2-pref-meta.tokens_per_example")  # chapter 11's mean example length
    sft = value("scaling_laws.Llama2-SFT.annotations") * mean * value("scaling_laws.Llama2-SFT.epochs")
    cells = []
    for row in r.tables["gpus"].rows:
        g = row[0]
        if f"gpus{g}_hours" not in q:
            continue
        hours = sft / BATCH_TOKENS * row[4].value / 3600  # the table's step
        slow = hours * q[f"gpus{g}_mfu"] / q[f"gpus{g}_mfu_low"]
        pairs[f"gpus{g}_hours"] = (q[f"gpus{g}_hours"], hours)
        pairs[f"gpus{g}_hours_slow"] = (q[f"gpus{g}_hours_slow"], slow)
        tp, pp, dp = (int(x) for x in re.match(r"TP (\d+) x PP (\d+) x DP (\d+)", row[1]).groups())
        pairs[f"gpus{g}_layout"] = (tp * pp * dp, g)  # the row's plan uses the row's GPUs
        low, high = row[6].split(" to ")
        cells += [(low, hours), (high, slow)]
    pairs_claim(
        r,
        "13B by hand: parameters from the config, 16Ψ, LoRA/QLoRA/8-bit Adam bytes, fine-tune hours per GPU count",
        pairs,
        formula="Ψ = L(4h² + 3h·ffn + 2h) + 2Vh + h; hours = 27,540 x mean length x 2 epochs / 262,144 x step",
    )
    for (_, _, per_param, gpus), method in zip(
        r.tables["peft"].rows, ("full", "full_adam8bit", "lora", "qlora"), strict=True
    ):
        cells += [(per_param, hand[method] / n), (gpus, hand[method] / usable)]
    printed_claim(r, "fine-tune tables by hand: bytes per parameter, GPUs' memory, SFT hours", cells)
    r.claim(
        "fewer GPUs: the table's rows are the page's 'one node of 1, 2, 4 and 8 GPUs' (largest difference)",
        max(abs(row[0] - g) for row, g in zip(r.tables["gpus"].rows, (1, 2, 4, GPUS), strict=True)),
        0,
    )
