"""Practice 4: why FlashAttention is faster although it does more FLOPs (experiment practice-flash)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.planner.config import Training
from distlab.planner.planner_validation import claim_band
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import finetune
from distlab.practice import why_flash_attention_checks


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
    from distlab.planner.kernels import FLASH_BACKWARD, MEMORY_EFFICIENCY, flash_flops_per_s, matmul_fraction

    r = Result("practice-flash", kind="computed")
    m, c, t = finetune("7B", gpu="H100-SXM")
    chip = c.gpu
    peak, hbm, ge = chip.peak_flops("bf16"), chip.hbm_bytes_per_s, matmul_fraction(chip)
    core = 4 * t.seq * t.seq * m.hidden  # QK^T and PV of one sequence, all heads, no causal skipping
    flops_std, flops_fa = 3 * core, (1 + FLASH_BACKWARD) * core  # backward: 2x, FlashAttention 2.5x (recomputes S)
    # the s x s scores through HBM: written (2), softmax read + written (4), read by PV (2); twice that backward
    scores = m.heads * t.seq * t.seq * (2 + 4 + 2)
    bytes_std = 3 * scores
    t_std = flops_std / (peak * ge) + bytes_std / (hbm * MEMORY_EFFICIENCY)
    t_fa = flops_fa / 2 / flash_flops_per_s(chip, t.seq, m.head_dim)  # causal: the kernel computes half the FLOPs
    r.add("seq", t.seq, "tokens", "sequence length")
    r.add("flops_std", flops_std, "FLOP", "one layer's attention core, forward + backward, standard")
    r.add("flops_fa", flops_fa, "FLOP", "the same with FlashAttention (its backward recomputes the scores)")
    r.add("flop_ratio", flops_fa / flops_std, "", "FlashAttention / standard FLOPs")
    r.add("bytes_std", bytes_std, "B", "HBM bytes of the s x s scores, softmax and their gradients, one layer")
    r.add("time_std", t_std, "s", "standard: matmuls at the GEMM share of peak + score traffic at the HBM share")
    r.add("time_fa", t_fa, "s", "FlashAttention: its causal half of the FLOPs at its published rate")
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
    from distlab.planner.calibration import mfu_band, with_band

    rows = []
    for attention in ("standard", "flash"):
        tt = Training(global_batch_tokens=t.global_batch_tokens, seq=t.seq, attention=attention)
        e = search(m, c, tt)[0]
        rows.append(
            [
                attention,
                e.plan.label(),
                Quantity(e.memory.activations, "B"),
                Quantity(e.memory_bytes, "B"),
                Quantity(e.step_seconds, "s"),
                with_band(e.time.mfu),
            ]
        )
        r.add(f"{attention}_step", e.step_seconds, "s", f"{attention}: best plan's step")
        r.add(f"{attention}_mfu", e.time.mfu, "fraction", f"{attention}: best plan's MFU")
        lo, hi = mfu_band(e.time.mfu)
        r.add(f"{attention}_mfu_low", lo, "fraction", f"{attention}: its band, low")
        r.add(f"{attention}_mfu_high", hi, "fraction", f"{attention}: its band, high")
        r.add(
            f"{attention}_recompute",
            {"none": 0, "selective": 1, "full": 2}[e.plan.recompute],
            "",
            f"{attention}: recompute (0 none, 1 selective, 2 full)",
        )
    r.table(
        "step",
        ["attention", "best plan", "activations per GPU", "memory per GPU", "step", "MFU (band)"],
        rows,
        caption="Llama 2 7B fine-tune on 8 H100s, best plan found by the planner with each attention (computed)",
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
    claim_band(r)  # the MFU bands this page quotes
    _chain(r, m, chip, t.seq, flops_std, flops_fa, t_std, t_fa)
    _whiteboard(r, m, chip, t.seq, flops_std, flops_fa, bytes_std, t_fa)
    _scores_memory(r, m, t.seq)
    _follow_ups(r, m, chip, t.seq, flops_fa, t_fa)
    why_flash_attention_checks.claims(
        r, gemm_share=ge, hbm_share=MEMORY_EFFICIENCY, fa2_flops_per_s=flash_flops_per_s(chip, t.seq, m.head_dim)
    )
    return r


VARLEN_DOC_TOKENS = 512  # follow-up: documents of 512 tokens packed into one 4096-token row (an input)


def _chain(r: Result, m, chip, seq: int, flops_std: float, flops_fa: float, t_std: float, t_fa: float) -> None:
    """One speed-up, and why chapter 8's roofline count gives another: the same layer under three sets of
    assumptions, each row changing one. Chapter 8 times every kernel at the chip's peak FLOP/s or HBM bandwidth and
    skips no masked tile; a causal FlashAttention skips half its tiles (standard attention computes them all and
    masks); real kernels reach a share of the peak (FlashAttention-2's published rate; the GEMMs' sustained share
    and 80 % of HBM bandwidth for standard attention's score traffic: the planner's kernel model)."""
    from distlab.attention.hbm_traffic import (
        flash_backward,
        flash_forward,
        roofline_seconds,
        standard_backward,
        standard_forward,
    )
    from distlab.core.results import Quantity

    peak, hbm = chip.peak_flops("bf16"), chip.hbm_bytes_per_s
    sram = chip.smem_per_sm_bytes // 2  # bf16 elements of shared memory per SM (chapter 8's M)
    d = m.head_dim
    roof_std = m.heads * roofline_seconds(standard_forward(seq, d) + standard_backward(seq, d), peak, hbm)
    fa_steps = [("forward", flash_forward(seq, d, sram)), ("backward", flash_backward(seq, d, sram))]
    roof_fa = m.heads * roofline_seconds(fa_steps, peak, hbm)
    rows = [
        ("roofline, every kernel at peak FLOP/s or HBM bandwidth, no tile skipped (chapter 8)", roof_std, roof_fa),
        ("+ causal: FlashAttention skips the masked half of its tiles", roof_std, roof_fa / 2),
        ("+ the rates kernels reach: FlashAttention-2's published rate, GEMMs and HBM at their shares", t_std, t_fa),
    ]
    r.add("roofline_speedup", roof_std / roof_fa, "", "chapter 8's roofline count for this layer (no causal skip)")
    r.add("causal_roofline_speedup", 2 * roof_std / roof_fa, "", "the same with FlashAttention skipping masked tiles")
    r.add("fa_rate", flops_fa / 2 / t_fa, "FLOP/s", "FlashAttention-2's rate the planner uses at this length")
    r.add("fa_rate_share", flops_fa / 2 / t_fa / peak, "fraction", "... as a share of the bf16 peak")
    r.add("std_slowdown", t_std / roof_std, "", "standard attention: planner time / roofline time")
    r.table(
        "chain",
        ["assumptions (one changes per row)", "standard", "FlashAttention", "speed-up"],
        [[label, Quantity(a, "s"), Quantity(b, "s"), f"{a / b:.2f}x"] for label, a, b in rows],
        caption=f"One {m.name} layer at sequence {seq:,}, forward + backward, {chip.name} (computed)",
    )
    r.claim(
        "a real FlashAttention kernel is no faster than its causal roofline",
        t_fa,
        roof_fa / 2,
        relation=">=",
        unit="s",
        formula="sum over kernels of max(FLOPs / peak, bytes / bandwidth), halved for the causal mask",
    )
    r.claim(
        "standard attention in the planner's model is no faster than its roofline",
        t_std,
        roof_std,
        relation=">=",
        unit="s",
    )
    r.claim(
        "the roofline count of one 7B layer: standard time = 12N^2d FLOPs at peak + 11N^2 + 12Nd elements at HBM "
        "bandwidth, at least (every standard kernel's larger term)",
        roof_std,
        m.heads * max(12 * seq * seq * d / peak, (11 * seq * seq + 12 * seq * d) * 2 / hbm),
        relation=">=",
        unit="s",
    )


def _whiteboard(r: Result, m, chip, seq: int, flops_std: float, flops_fa: float, bytes_std: float, t_fa) -> None:
    """The round-number chain a candidate says out loud (the page rounds each to two figures): FLOPs, the score
    bytes at the HBM rate against the FLOPs at the peak, FlashAttention's causal half at its rate."""
    from distlab.hardware.gpus import data_claims
    from distlab.planner.kernels import MEMORY_EFFICIENCY

    data_claims(r, [chip.name, "B200"])  # the page quotes the H100's HBM rate and peak, and the B200's peak
    r.add("hbm_bytes_per_s", chip.hbm_bytes_per_s, "B/s", f"{chip.name} HBM datasheet bandwidth")
    peak, hbm = chip.peak_flops("bf16"), chip.hbm_bytes_per_s * MEMORY_EFFICIENCY
    r.add("wb_hbm_share", MEMORY_EFFICIENCY, "fraction", "HBM share a memory-bound kernel reaches")
    r.add("wb_scores_s", bytes_std / hbm, "s", "standard: the score traffic at that HBM rate")
    r.add("wb_matmul_s", flops_std / peak, "s", "standard: its matmuls at the bf16 peak")
    r.add("wb_memory_over_compute", bytes_std / hbm / (flops_std / peak), "", "how memory-bound standard attention is")
    r.add("wb_fa_flops_causal", flops_fa / 2, "FLOP", "FlashAttention's causal half of its FLOPs")
    r.add("wb_std_s", bytes_std / hbm + flops_std / peak, "s", "standard: bytes + matmuls at the peak")
    r.add("wb_speedup", (bytes_std / hbm + flops_std / peak) / t_fa, "", "the whiteboard's speed-up")
    r.claim(
        "standard attention's score matrix: H N^2 elements of 2 bytes, written and read 12 times per layer",
        bytes_std,
        12 * m.heads * seq * seq * 2,
        rel_tol=1e-12,
        unit="B",
        formula="forward: written (1), softmax read + written (2), read by PV (1); backward twice that",
    )
    r.claim(
        "the whiteboard lands within 10 % of the planner's one-layer speed-up (it runs the GEMMs at the peak)",
        r.quantities["wb_speedup"].value,
        r.quantities["speedup"].value,
        rel_tol=0.1,
    )


def _scores_memory(r: Result, m, seq: int) -> None:
    """What standard attention keeps per layer beyond FlashAttention, in units of a s^2 b bytes: 2 without
    dropout (the bf16 probabilities, which both the softmax's backward and PV's read), 5 with dropout
    (Korthikanti et al.'s 5as^2b: the probabilities, a 1-byte mask and the dropped probabilities). The planner
    trains without dropout, as Llama 2 did."""
    from distlab.memory.activations import model_activation_bytes_per_layer

    unit = m.heads * seq * seq  # a s^2 b, b = 1
    for dropout in (False, True):
        extra = model_activation_bytes_per_layer(
            m, seq, 1, attention="eager", dropout=dropout
        ) - model_activation_bytes_per_layer(m, seq, 1, attention="flash", dropout=dropout)
        key = "dropout" if dropout else "nodropout"
        r.add(f"scores_{key}_per_as2b", round(extra / unit, 2), "", f"standard's extra bytes per score, {key}")
        r.add(f"scores_{key}_bytes", extra, "B", f"standard's extra bytes per layer, one sequence, {key}")
        r.claim(
            f"standard attention keeps {'5' if dropout else '2'} a s^2 b more than FlashAttention "
            f"({'with' if dropout else 'without'} dropout), to within its O(sh) terms",
            extra / unit,
            5.0 if dropout else 2.0,
            rel_tol=0.02,
            formula="2 (probabilities) + 1 (dropout mask) + 2 (dropped probabilities) bytes per score"
            if dropout
            else "2 (bf16 probabilities) bytes per score",
        )


def _follow_ups(r: Result, m, chip, seq: int, flops_fa: float, t_fa: float) -> None:
    """FlashAttention-3 and -4 at their published rates, and varlen packing, for the same 7B layer."""
    from distlab.core.facts import value
    from distlab.gpu.flops import flops_per_token
    from distlab.hardware.gpus import gpu

    fa3 = value("flash_attention.FA3.fp16_tflops") * 1e12
    fa4 = value("flash_attention.FA4.bf16_tflops") * 1e12
    b200 = gpu("B200").peak_flops("bf16")
    r.add("fa3_s", flops_fa / 2 / fa3, "s", "the layer's causal attention at FlashAttention-3's published rate")
    r.add("fa3_over_fa2", t_fa / (flops_fa / 2 / fa3), "", "FlashAttention-3 / -2 speed on this layer")
    r.add("fa4_s", flops_fa / 2 / fa4, "s", "the same at FlashAttention-4's published B200 rate")
    r.claim(
        "FlashAttention-3's published rate = its published share of the H100's peak",
        fa3 / chip.peak_flops("bf16"),
        value("flash_attention.FA3.fp16_peak_fraction"),
        abs_tol=0.01,
        unit="fraction",
        formula="740 TFLOP/s / 989 TFLOP/s = 75 % (the paper's abstract)",
    )
    r.claim(
        "FlashAttention-4's published rate = its published share of the B200's bf16 peak",
        fa4 / b200,
        value("flash_attention.FA4.bf16_peak_fraction"),
        abs_tol=0.01,
        unit="fraction",
        formula="1613 TFLOP/s / 2250 TFLOP/s = 71 % (the paper's abstract)",
    )
    n = m.params()
    full = flops_per_token(n, m.layers, m.hidden, seq)
    r.add("attention_flop_share", 12 * m.layers * m.hidden * seq / full, "fraction", "12Lhs / (6N + 12Lhs)")
    varlen = flops_per_token(n, m.layers, m.hidden, VARLEN_DOC_TOKENS)
    r.add("varlen_doc_tokens", VARLEN_DOC_TOKENS, "tokens", "documents packed into one row (input)")
    r.add("varlen_attention_ratio", seq / VARLEN_DOC_TOKENS, "", "attention FLOPs, packed row / per document")
    r.add("varlen_step_saving", 1 - varlen / full, "fraction", "step FLOPs saved by varlen at that packing")
    r.claim(
        "varlen attention over k documents of s/k tokens does 1/k of the row's attention FLOPs",
        (full - 6 * n) / (varlen - 6 * n),
        seq / VARLEN_DOC_TOKENS,
        rel_tol=1e-12,
        formula="sum of (s/k)^2 over k documents = s^2 / k",
    )
