"""The accelerators' data with derived ridge points and ratios (experiment gpu-specs), from distlab.hardware.gpus."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import GPU, KIB, MIB, gpu, gpu_names


# ---------------------------------------------------------------- the chapter's hardware tables
@experiment("gpu-specs", "accelerator data with derived ridge points, SRAM/HBM and bandwidth ratios", kind="computed")
def gpu_specs(device: str) -> Result:
    r = Result("gpu-specs", kind="computed")
    chips = [gpu(n) for n in gpu_names()]
    rows = []
    for g in chips:
        rows.append(
            [
                g.name,
                g.sms,
                Quantity(g.hbm_bytes, "B"),
                Quantity(g.hbm_bytes_per_s, "B/s"),
                _tf(g, "bf16"),
                _tf(g, "fp8"),
                _tf(g, "tf32"),
                _tf(g, "fp32"),
                f"{g.smem_per_sm_bytes // KIB} KiB",
                f"{g.l2_bytes / MIB:g} MiB",
                Quantity(g.link_bytes_per_s, "B/s"),
            ]
        )
    r.table(
        "chips",
        [
            "chip",
            "SMs/CUs",
            "HBM",
            "HBM bandwidth",
            "bf16",
            "fp8",
            "tf32",
            "fp32 (vector)",
            "smem/SM",
            "L2",
            "link, one direction",
        ],
        rows,
        caption="Dense peaks (TFLOP/s, no 2:4 sparsity), memory and links per GPU, from distlab/data/gpus.toml; "
        "'—' means the chip has no fast path for that dtype.",
    )
    ridge_rows = []
    for g in chips:
        ridge_rows.append(
            [g.name] + [f"{g.ridge(dt):.0f}" if dt in g.peaks else "—" for dt in ("fp32", "tf32", "bf16", "fp8")]
        )
    r.table(
        "ridges",
        ["chip", "fp32", "tf32", "bf16", "fp8"],
        ridge_rows,
        caption="Ridge point, FLOP per HBM byte = dense peak FLOP/s / HBM bytes/s: below it a kernel is "
        "memory-bound, above it compute-bound.",
    )
    ratio_rows = []
    for g in chips:
        ratio_rows.append(
            [
                g.name,
                Quantity(g.smem_total_bytes, "B"),
                f"{g.hbm_bytes / g.smem_total_bytes:,.0f}x",
                f"{g.hbm_bytes / g.l2_bytes:,.0f}x",
                f"{g.hbm_bytes_per_s / g.link_bytes_per_s:.1f}x",
                f"{g.peak_flops('bf16') / g.peak_flops('fp32'):.1f}x",
            ]
        )
    r.table(
        "ratios",
        [
            "chip",
            "shared memory, all SMs",
            "HBM / all shared memory",
            "HBM / L2",
            "HBM bandwidth / link bandwidth",
            "bf16 tensor / fp32 vector",
        ],
        ratio_rows,
        caption="Ratios derived from the data file.",
    )
    for g in chips:
        # Data-entry checks: the printed with-sparsity figure is twice the dense one we use, fp16 = bf16.
        r.claim(
            f"{g.name}: datasheet sparse bf16 = 2 x the dense peak used here",
            g.bf16_sparse_flops,
            2 * g.peak_flops("bf16"),
            rel_tol=1e-3,
            unit="FLOP/s",
            formula="2:4 sparsity doubles the rate",
        )
        r.claim(
            f"{g.name}: fp16 dense peak = bf16 dense peak", g.peak_flops("fp16"), g.peak_flops("bf16"), unit="FLOP/s"
        )
        slug = g.name.split("-")[0].lower()
        r.add(f"{slug}_ridge_bf16", g.ridge("bf16"), "FLOP/B", f"{g.name} bf16 ridge point")
        r.add(f"{slug}_ridge_fp32", g.ridge("fp32"), "FLOP/B", f"{g.name} fp32 (vector) ridge point")
        r.add(f"{slug}_smem_total", g.smem_total_bytes, "B", f"{g.name} shared memory, all SMs")
        r.add(f"{slug}_hbm_over_smem", g.hbm_bytes / g.smem_total_bytes, "", f"{g.name} HBM / all shared memory")
        r.add(
            f"{slug}_hbm_over_link",
            g.hbm_bytes_per_s / g.link_bytes_per_s,
            "",
            f"{g.name} HBM bandwidth / one-direction link bandwidth",
        )
        r.add(f"{slug}_link", g.link_bytes_per_s, "B/s", f"{g.name} link bandwidth, one direction")
        r.add(
            f"{slug}_bf16_over_fp32",
            g.peak_flops("bf16") / g.peak_flops("fp32"),
            "",
            f"{g.name} bf16 tensor-core peak / fp32 vector peak",
        )
        r.add(f"{slug}_bytes_per_flop_bf16", 1 / g.ridge("bf16"), "B/FLOP", f"{g.name} HBM bytes per bf16 FLOP")
        # a square bf16 GEMM has intensity 2n / (3 x 2 B): it reaches the ridge at n = 3 x ridge
        r.add(f"{slug}_square_gemm_n_at_ridge", 3 * g.ridge("bf16"), "", f"{g.name}: bf16 n x n GEMM at the ridge")
    h100 = gpu("H100-SXM")
    _worked_problems(r, h100)
    r.add("h100_smem_per_sm", h100.smem_per_sm_bytes, "B", "H100 shared memory per SM")
    r.add("h100_l2", h100.l2_bytes, "B", "H100 L2")
    r.add("h100_sms", h100.sms, "", "H100 SMs")
    r.add("h100_peak_bf16", h100.peak_flops("bf16"), "FLOP/s", "H100 dense bf16 peak")
    r.add("h100_hbm_bw", h100.hbm_bytes_per_s, "B/s", "H100 HBM bandwidth")
    return r


REPORTED_MFU = 0.60  # worked problem: an MFU a team reports with a peak hard-coded for the A100


def _worked_problems(r: Result, h100: GPU) -> None:
    from distlab.models.shapes import preset

    n = preset("7B").params()
    weights = 2 * n  # bf16
    r.add("wp_7b_weights", weights, "B", "Llama 2 7B bf16 weights")
    r.add("wp_7b_decode_s", weights / h100.hbm_bytes_per_s, "s", "batch-1 decode step: weights / HBM bandwidth")
    r.add("wp_7b_decode_tokens_per_s", h100.hbm_bytes_per_s / weights, "tokens/s", "batch-1 decode ceiling")
    r.add(
        "wp_7b_decode_mfu",
        2 * n * h100.hbm_bytes_per_s / weights / h100.peak_flops("bf16"),
        "fraction",
        "batch-1 decode at the memory roof: share of the bf16 peak",
    )
    r.add("wp_reported_mfu", REPORTED_MFU, "fraction", "reported MFU with the A100 peak")
    r.add(
        "wp_true_mfu",
        REPORTED_MFU * gpu("A100-SXM-80GB").peak_flops("bf16") / h100.peak_flops("bf16"),
        "fraction",
        "the same run against the H100 peak",
    )


def _tf(g: GPU, dtype: str) -> str:
    return f"{g.peak_flops(dtype) / 1e12:g}" if dtype in g.peaks else "—"
