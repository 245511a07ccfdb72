"""Practice 4's numbers worked by hand: one Llama 2 7B layer's attention FLOPs (4s²h forward, 8s²h or 10s²h
backward), the score matrix's bytes through HBM, the roofline over chapter 8's kernels as its by-hand module lists
them (distlab/attention/flash_attention_checks.py), the planner's rates applied to those counts, the follow-ups'
published rates and varlen's FLOPs, all typed out here, never taken from the experiment's helpers.

The planner's kernel model (the GEMMs' sustained share of the peak, 80 % of HBM bandwidth for element-wise kernels,
FlashAttention-2's published rate at this length) enters as inputs: chapters 12-13 guard it.
"""

from __future__ import annotations

from distlab.attention import flash_attention_checks as fa_hand
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.practice.checks import pairs_claim, printed_claim

# Llama 2 7B's config.json: 32 layers, hidden 4096, 32 heads of 128, SwiGLU 11008, vocabulary 32000, untied
H, HEADS, D, FFN, LAYERS, VOCAB, SEQ = 4096, 32, 128, 11008, 32, 32000, 4096
PARAMS_7B = LAYERS * (4 * H * H + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H  # 6,738,415,616
GPUS, BATCH_TOKENS = 8, 64 * SEQ  # the fine-tune: one node of 8 H100s, 64 sequences a step


def _roofline(kernels: list[tuple[float, float]], peak: float, hbm: float) -> float:
    """Σ max(FLOPs / peak, bytes / bandwidth) over one head's kernels, times the heads (bf16: 2 bytes an element)."""
    return HEADS * sum(max(flops / peak, elements * 2 / hbm) for elements, flops in kernels)


def claims(r: Result, *, gemm_share: float, hbm_share: float, fa2_flops_per_s: float) -> None:
    """Every number practice 4 computes itself. The planner's inputs: the GEMMs' share of the peak, the HBM share
    of element-wise kernels and FlashAttention-2's rate at this length on an H100."""
    q = {k: v.value for k, v in r.quantities.items()}
    peak, hbm = fa_hand.h100()
    s = SEQ
    flops_std, flops_fa = 12 * s * s * H, 14 * s * s * H  # forward 4s²h; backward 8s²h, FlashAttention 10s²h
    scores = 12 * HEADS * s * s * 2  # H s² bf16 scores: written, softmax read + written, read by PV; twice backward
    t_std = flops_std / (peak * gemm_share) + scores / (hbm * hbm_share)
    t_fa = flops_fa / 2 / fa2_flops_per_s  # causal: half the tiles
    roof_std = _roofline(fa_hand.standard_kernels(s, D), peak, hbm)
    roof_fa = _roofline(fa_hand.flash_kernels(s, D, fa_hand.m_elements()), peak, hbm)
    fa3, fa4 = value("flash_attention.FA3.fp16_tflops") * 1e12, value("flash_attention.FA4.bf16_tflops") * 1e12
    per_token = 6 * PARAMS_7B + 12 * LAYERS * H * s
    doc = q["varlen_doc_tokens"]
    wb_std = scores / (hbm * hbm_share) + flops_std / peak
    pairs = {
        "seq": (q["seq"], SEQ),
        "flops_std": (q["flops_std"], flops_std),
        "flops_fa": (q["flops_fa"], flops_fa),
        "flop_ratio": (q["flop_ratio"], 14 / 12),
        "bytes_std": (q["bytes_std"], scores),
        "time_std": (q["time_std"], t_std),
        "time_fa": (q["time_fa"], t_fa),
        "speedup": (q["speedup"], t_std / t_fa),
        "score_share": (q["score_share"], scores / (hbm * hbm_share) / t_std),
        "step_speedup": (q["step_speedup"], q["standard_step"] / q["flash_step"]),
        "roofline_speedup": (q["roofline_speedup"], roof_std / roof_fa),
        "causal_roofline_speedup": (q["causal_roofline_speedup"], 2 * roof_std / roof_fa),
        "fa_rate": (q["fa_rate"], fa2_flops_per_s),
        "fa_rate_share": (q["fa_rate_share"], fa2_flops_per_s / peak),
        "std_slowdown": (q["std_slowdown"], t_std / roof_std),
        "hbm_bytes_per_s": (q["hbm_bytes_per_s"], hbm),
        "wb_scores_s": (q["wb_scores_s"], scores / (hbm * hbm_share)),
        "wb_matmul_s": (q["wb_matmul_s"], flops_std / peak),
        "wb_memory_over_compute": (q["wb_memory_over_compute"], scores / (hbm * hbm_share) / (flops_std / peak)),
        "wb_fa_flops_causal": (q["wb_fa_flops_causal"], flops_fa / 2),
        "wb_std_s": (q["wb_std_s"], wb_std),
        "wb_speedup": (q["wb_speedup"], wb_std / t_fa),
        "fa3_s": (q["fa3_s"], flops_fa / 2 / fa3),
        "fa3_over_fa2": (q["fa3_over_fa2"], t_fa / (flops_fa / 2 / fa3)),
        "fa4_s": (q["fa4_s"], flops_fa / 2 / fa4),
        "attention_flop_share": (q["attention_flop_share"], 12 * LAYERS * H * s / per_token),
        "varlen_attention_ratio": (q["varlen_attention_ratio"], s / doc),
        "varlen_step_saving": (q["varlen_step_saving"], 1 - (6 * PARAMS_7B + 12 * LAYERS * H * doc) / per_token),
    }
    for attention in ("standard", "flash"):  # MFU counts the model's FLOPs, not a kernel's recomputation
        mfu = BATCH_TOKENS * per_token / (GPUS * peak * q[f"{attention}_step"])
        pairs[f"{attention}_mfu"] = (q[f"{attention}_mfu"], mfu)
    chain = [(roof_std, roof_fa), (roof_std, roof_fa / 2), (t_std, t_fa)]
    for i, (row, (a, b)) in enumerate(zip(r.tables["chain"].rows, chain, strict=True)):
        pairs[f"chain_{i}_standard"], pairs[f"chain_{i}_flash"] = (row[1].value, a), (row[2].value, b)
    pairs_claim(
        r,
        "7B layer by hand: FLOPs 12s²h and 14s²h, score bytes 24Hs², times at the planner's rates, rooflines, "
        "follow-ups, MFU",
        pairs,
        formula="roofline = H Σ max(FLOPs / peak, 2 x elements / HBM) over chapter 8's kernels, typed out",
    )
    cells = [(row[3], a / b) for row, (a, b) in zip(r.tables["chain"].rows, chain, strict=True)]
    cells.append((r.tables["chain"].caption.split("sequence ")[1], SEQ))
    for key in ("nodropout", "dropout"):  # the per-score figure is the bytes over H s², printed to two decimals
        cells.append((f"{q[f'scores_{key}_per_as2b']:.2f}", q[f"scores_{key}_bytes"] / (HEADS * s * s)))
    printed_claim(r, "chain table's speed-ups, its caption and the bytes per score, by hand", cells)
