"""Practice 4: why FlashAttention is faster although it does more FLOPs (experiment practice-flash)."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.planner.config import Training
from distlab.planner.planner_validation import claim_band
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import finetune


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
    return r
