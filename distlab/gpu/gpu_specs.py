"""The accelerators' data with derived ridge points and ratios (experiment gpu-specs), from distlab.hardware.gpus."""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import entries
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import BYTES_PER_ELEMENT, GPU, PEAK_FIELDS, data_claims, gpu, gpu_names

LLAMA2_7B_PARAMS = 6_738_415_616  # the released checkpoint's tensors, counted (hand-worked case for the preset)


# ---------------------------------------------------------------- the chapter's hardware tables
@experiment("gpu-specs", "accelerator data with derived ridge points, SRAM/HBM and bandwidth ratios", kind="computed")
def gpu_specs(device: str) -> Result:
    r = Result("gpu-specs", kind="computed")
    chips = [gpu(n) for n in gpu_names()]
    raw = entries("gpus")
    rows = []
    for g in chips:
        printed = raw[g.name]  # SRAM sizes and peaks as the sources print them (KiB, MiB, TFLOP/s)
        rows.append(
            [
                g.name,
                g.sms,
                Quantity(g.hbm_bytes, "B"),
                Quantity(g.hbm_bytes_per_s, "B/s"),
                _tf(printed, "bf16"),
                _tf(printed, "fp8"),
                _tf(printed, "tf32"),
                _tf(printed, "fp32"),
                f"{printed['smem_per_sm_kib']:g} KiB",
                f"{printed['l2_mib']:g} MiB",
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
    ratios = {g.name: _ratios(g) for g in chips}
    ratio_rows = []
    for g in chips:
        q = ratios[g.name]
        ratio_rows.append(
            [
                g.name,
                Quantity(g.smem_total_bytes, "B"),
                f"{q['hbm_over_smem']:,.0f}x",
                f"{q['hbm_over_l2']:,.0f}x",
                f"{q['hbm_over_link']:.1f}x",
                f"{q['bf16_over_fp32']:.1f}x",
            ]
        )
    _ratio_claims(r, chips, ratios)
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
    data_claims(r, [g.name for g in chips])
    for g in chips:
        # Data-entry checks: the printed with-sparsity figure is twice the dense one we use, fp16 = bf16.
        r.claim(
            f"{g.name}: printed sparse bf16 = 2 x dense",
            g.bf16_sparse_flops,
            2 * g.peak_flops("bf16"),
            rel_tol=1e-3,
            unit="FLOP/s",
        )
        r.claim(f"{g.name}: fp16 = bf16", g.peak_flops("fp16"), g.peak_flops("bf16"), unit="FLOP/s")
        slug = g.name.split("-")[0].lower()
        r.add(f"{slug}_ridge_bf16", g.ridge("bf16"), "FLOP/B", f"{g.name} bf16 ridge point")
        r.add(f"{slug}_ridge_fp32", g.ridge("fp32"), "FLOP/B", f"{g.name} fp32 (vector) ridge point")
        r.add(f"{slug}_smem_total", g.smem_total_bytes, "B", f"{g.name} shared memory, all SMs")
        q = ratios[g.name]
        r.add(f"{slug}_hbm_over_smem", q["hbm_over_smem"], "", f"{g.name} HBM / all shared memory")
        r.add(
            f"{slug}_hbm_over_link",
            q["hbm_over_link"],
            "",
            f"{g.name} HBM bandwidth / one-direction link bandwidth",
        )
        r.add(f"{slug}_link", g.link_bytes_per_s, "B/s", f"{g.name} link bandwidth, one direction")
        r.add(
            f"{slug}_bf16_over_fp32",
            q["bf16_over_fp32"],
            "",
            f"{g.name} bf16 tensor-core peak / fp32 vector peak",
        )
        r.add(f"{slug}_bytes_per_flop_bf16", q["bytes_per_flop"], "B/FLOP", f"{g.name} HBM bytes per bf16 FLOP")
    for g in (gpu("H100-SXM"), gpu("H200")):  # the two the page shows
        # a square bf16 GEMM has intensity 2n / (3 x 2 B): it reaches the ridge at n = 3 x ridge
        n_ridge = 3 * g.ridge("bf16")
        slug = g.name.split("-")[0].lower()
        r.add(f"{slug}_square_gemm_n_at_ridge", n_ridge, "", f"{g.name}: bf16 n x n GEMM at the ridge")
        r.claim(
            f"{g.name}: bf16 GEMM at n* has intensity 2n^3 / (3n^2 x 2 B) = ridge",
            2 * n_ridge**3 / (3 * n_ridge**2 * 2),
            g.ridge("bf16"),
            rel_tol=1e-12,
            unit="FLOP/B",
        )
    h100 = gpu("H100-SXM")
    _derived_checks(r, h100, gpu("H200"))
    _worked_problems(r, h100)
    r.add("h100_smem_per_sm", h100.smem_per_sm_bytes, "B", "H100 shared memory per SM")
    r.add("h100_l2", h100.l2_bytes, "B", "H100 L2")
    r.add("h100_sms", h100.sms, "", "H100 SMs")
    r.add("h100_peak_bf16", h100.peak_flops("bf16"), "FLOP/s", "H100 dense bf16 peak")
    r.add("h100_hbm_bw", h100.hbm_bytes_per_s, "B/s", "H100 HBM bandwidth")
    return r


def _derived_checks(r: Result, h100: GPU, h200: GPU) -> None:
    """The chapter's derived numbers recomputed in float64 from the data file's printed values (TFLOP/s, TB/s,
    KiB as typed), independently of gpus.py's unit conversions."""
    raw = entries("gpus")
    for g in (h100, h200):
        printed = raw[g.name]
        r.claim(
            f"{g.name}: bf16 ridge = printed TFLOP/s / printed TB/s",
            g.ridge("bf16"),
            printed["bf16_dense_tflops"] / printed["hbm_tbps"],
            rel_tol=1e-12,
            unit="FLOP/B",
            formula="the 1e12 of TFLOP/s and of TB/s cancel",
        )


REPORTED_MFU = 0.60  # worked problem: an MFU a team reports with a peak hard-coded for the A100


def _worked_problems(r: Result, h100: GPU) -> None:
    from distlab.models.shapes import preset

    n = preset("7B").params()
    r.claim("Llama 2 7B parameters = the released checkpoint's count", n, LLAMA2_7B_PARAMS)
    weights = BYTES_PER_ELEMENT["bf16"] * n
    decode_s = weights / h100.hbm_bytes_per_s
    tokens_per_s = h100.hbm_bytes_per_s / weights
    decode_mfu = 2 * n * tokens_per_s / h100.peak_flops("bf16")
    r.add("wp_7b_weights", weights, "B", "Llama 2 7B bf16 weights")
    r.add("wp_7b_decode_s", decode_s, "s", "batch-1 decode step: weights / HBM bandwidth")
    r.add("wp_7b_decode_tokens_per_s", tokens_per_s, "tokens/s", "batch-1 decode ceiling")
    r.add("wp_7b_decode_mfu", decode_mfu, "fraction", "batch-1 decode at the memory roof: share of the bf16 peak")
    r.add("wp_reported_mfu", REPORTED_MFU, "fraction", "reported MFU with the A100 peak")
    true_mfu = REPORTED_MFU * gpu("A100-SXM-80GB").peak_flops("bf16") / h100.peak_flops("bf16")
    r.add("wp_true_mfu", true_mfu, "fraction", "the same run against the H100 peak")
    raw = entries("gpus")
    printed_bw = raw["H100-SXM"]["hbm_tbps"] * 1e12
    r.claim(
        "batch-1 decode: a matvec does 1 FLOP per bf16 byte, so its MFU at the memory roof = 1 / ridge",
        decode_mfu,
        raw["H100-SXM"]["hbm_tbps"] / raw["H100-SXM"]["bf16_dense_tflops"],
        rel_tol=1e-12,
        formula="(2 FLOP / 2 B) x B / P",
    )
    r.claim(
        "decode step x HBM bandwidth = bf16 weight bytes (2 per parameter)",
        decode_s * printed_bw,
        2 * LLAMA2_7B_PARAMS,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "decode tokens/s x weight bytes / HBM bandwidth = 1",
        tokens_per_s * 2 * LLAMA2_7B_PARAMS / printed_bw,
        1.0,
        rel_tol=1e-12,
    )
    r.claim(
        "true MFU = reported x A100 peak / H100 peak (printed TFLOP/s)",
        true_mfu,
        REPORTED_MFU * raw["A100-SXM-80GB"]["bf16_dense_tflops"] / raw["H100-SXM"]["bf16_dense_tflops"],
        rel_tol=1e-12,
        unit="fraction",
    )


def _tf(printed: dict, dtype: str) -> str:
    field = PEAK_FIELDS[dtype]
    return f"{printed[field]:g}" if field in printed else "—"


def _ratios(g: GPU) -> dict[str, float]:
    """The ratios table's cells for one chip, from gpus.py's conversions (claimed against the printed figures)."""
    return {
        "hbm_over_smem": g.hbm_bytes / g.smem_total_bytes,
        "hbm_over_l2": g.hbm_bytes / g.l2_bytes,
        "hbm_over_link": g.hbm_bytes_per_s / g.link_bytes_per_s,
        "bf16_over_fp32": g.peak_flops("bf16") / g.peak_flops("fp32"),
        "bytes_per_flop": 1 / g.ridge("bf16"),
    }


def _ratio_claims(r: Result, chips: list[GPU], ratios: dict[str, dict[str, float]]) -> None:
    """Each ratio of every chip recomputed in float64 from the data file's printed figures and units (GB, TB/s,
    KiB, MiB, TFLOP/s; links from links x per-link rate where the source prints it), none of gpus.py's
    conversions: one claim per ratio, the largest relative gap over the chips."""
    raw = entries("gpus")

    def link_gbps(name: str) -> float:  # one direction, GB/s
        row = entries("interconnect")[name]
        if "gbytes_per_s_per_link_per_direction" in row:  # NVLink: links x the printed per-link rate
            return row["links"] * row["gbytes_per_s_per_link_per_direction"]
        # xGMI: a full mesh, one link to each other GPU of the platform, lanes x Gb/s each way
        return (row["platform_gpus"] - 1) * row["lanes_per_link"] * row["gbits_per_s_per_lane"] / 8

    reference = {
        "hbm_over_smem": lambda p: p["hbm_gb"] * 1e9 / (p["sms"] * p["smem_per_sm_kib"] * 1024),
        "hbm_over_l2": lambda p: p["hbm_gb"] * 1e9 / (p["l2_mib"] * 1_048_576),
        "hbm_over_link": lambda p: p["hbm_tbps"] * 1000 / link_gbps(p["link"]),
        "bf16_over_fp32": lambda p: p["bf16_dense_tflops"] / p["fp32_tflops"],
        "bytes_per_flop": lambda p: p["hbm_tbps"] / p["bf16_dense_tflops"],
    }
    for key, ref in reference.items():
        gap = max(abs(ratios[g.name][key] / ref(raw[g.name]) - 1) for g in chips)
        r.claim(f"ratios, {key}: largest gap from printed figures", gap, 0.0, abs_tol=1e-12)
