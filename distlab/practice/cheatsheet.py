"""The cheat sheet's own numbers (experiment cheatsheet): only what no chapter's experiment already computes. The page
shows every other number straight from the chapter that derives it (gpu-specs, ring-allreduce, pipeline-schedules,
practice-checkpoint), so one quantity keeps one value across the site.

What is here: the fp8 ridge points, the bytes per parameter of the three conventions, one 7B layer's activations in
the GPT formula and its FlashAttention and Llama forms, 6N + 12Lhs at 7B, the ring factor 2(N-1)/N at a few sizes,
and the MFU bands of the published runs that print an MFU."""

from __future__ import annotations

import statistics

from distlab.core.experiments import experiment
from distlab.core.results import Result

CHIPS = ("H100-SXM", "H200", "B200")
RING_SIZES = (2, 8, 64, 1024)
SHEET_MODEL = "7B"  # the activation and FLOP rows: Llama 2 7B at its training sequence, one sequence


@experiment(
    "cheatsheet", "numbers every practitioner should know: what the chapters do not already compute", kind="computed"
)
def cheatsheet(device: str) -> Result:
    r = Result("cheatsheet", kind="computed")
    _ridges(r)
    _bytes_per_param(r)
    _activations_and_flops(r)
    _ring_factors(r)
    _mfu_bands(r)
    r.claim(
        "published H100 runs reach a lower median MFU than A100 runs",
        r.quantities["mfu_h100_median"].value,
        r.quantities["mfu_a100_median"].value,
        relation="<=",
        unit="fraction",
    )
    return r


def _ridges(r: Result) -> None:
    """fp8 ridge points (the bf16 ones are chapter 2's gpu-specs): peak FLOP/s over HBM bytes/s."""
    from distlab.hardware.gpus import data_claims, gpu

    data_claims(r, list(CHIPS))  # fp8 = 2 x bf16, HBM = bus x clock, ...: a datasheet typo fails this page
    for name in CHIPS:
        g = gpu(name)
        key = name.split("-")[0].lower()
        ridge = g.peak_flops("fp8") / g.hbm_bytes_per_s
        r.add(f"{key}_bf16_peak", g.peak_flops("bf16"), "FLOP/s", f"{name}: dense bf16 peak (datasheet)")
        r.add(f"{key}_fp8_peak", g.peak_flops("fp8"), "FLOP/s", f"{name}: dense fp8 peak (datasheet)")
        r.add(f"{key}_hbm", g.hbm_bytes_per_s, "B/s", f"{name}: HBM bandwidth (datasheet)")
        r.add(f"{key}_ridge_fp8", ridge, "FLOP/B", f"{name}: fp8 dense peak / HBM bandwidth")
        if name == "H200":
            h100 = gpu("H100-SXM")
            r.claim("H200: the H100's bf16 peak", g.peak_flops("bf16"), h100.peak_flops("bf16"), unit="FLOP/s")
            r.claim("... with faster memory, so a lower ridge", g.ridge("bf16"), h100.ridge("bf16"), relation="<=")
        r.claim(
            f"{name}: fp8 ridge = 2 x the bf16 ridge (the datasheet's fp8 peak doubles bf16's)",
            ridge,
            2 * g.ridge("bf16"),
            rel_tol=1e-3,
            unit="FLOP/B",
        )


def _bytes_per_param(r: Result) -> None:
    """16 (ZeRO's mixed precision), 18 (Megatron's fp32 main_grad), 20 (an fp32 buffer beside bf16 gradients)."""
    from distlab.memory.model_states import add_state_bytes

    add_state_bytes(r)


def _activations_and_flops(r: Result) -> None:
    """One Llama 2 7B layer, one sequence: Korthikanti's GPT formula sbh(34 + 5as/h), its FlashAttention form 34sbh
    (no s x s term), and Llama's own count with FlashAttention (chapter 3); then 6N + 12Lhs per token."""
    from distlab.gpu.flops import flops_per_token
    from distlab.memory.activations import activation_bytes_per_layer, model_activation_bytes_per_layer
    from distlab.models.published import claim_checkpoint_count, claim_llama2_context
    from distlab.models.shapes import presets, published_params

    m = presets()[SHEET_MODEL]
    claim_checkpoint_count(r, SHEET_MODEL)  # a typo in the shape moves every row below: the shape's count must
    claim_llama2_context(r, m)  # still be the checkpoint's, its sequence the paper's 4k
    s, b, h, a = m.seq, 1, m.hidden, m.heads
    gpt = activation_bytes_per_layer(s, b, h, a, recompute="none")
    gpt_flash = activation_bytes_per_layer(s, b, h, a, recompute="selective")
    llama = model_activation_bytes_per_layer(m, s, b, attention="flash", recompute="none")
    r.add("act_gpt_layer", gpt, "B", "GPT formula sbh(34 + 5as/h), one 7B-shaped layer, one sequence")
    r.add("act_gpt_flash_layer", gpt_flash, "B", "the same with FlashAttention: 34sbh")
    r.add("act_llama_flash_layer", llama, "B", "Llama 2 7B's own layer with FlashAttention (chapter 3)")
    r.add("act_seq", s, "tokens", "sequence of those rows")
    r.claim("GPT layer = sbh(34 + 5as/h) (Korthikanti et al. Table 2)", gpt, s * b * h * (34 + 5 * a * s / h), unit="B")
    r.claim("... with FlashAttention = 34sbh", gpt_flash, 34 * s * b * h, unit="B")
    f = m.ffn
    r.claim(
        "Llama layer with FlashAttention = 12sbh + 4sbh g/a + 8sbf + 4abs + 8sb (chapter 3)",
        llama,
        12 * s * b * h + 4 * s * b * h * m.kv_heads / a + 8 * s * b * f + 4 * a * b * s + 8 * s * b,
        rel_tol=1e-12,
        unit="B",
    )
    n = m.params()
    per_token = flops_per_token(n, m.layers, h, s)
    r.add("flops_per_token_7b", per_token, "FLOP", "6N + 12Lhs per token, Llama 2 7B at 4096")
    r.add("attention_share_7b", 12 * m.layers * h * s / per_token, "fraction", "12Lhs's share of it")
    attention = 12.0 * m.layers * h * s
    checkpoint = float(published_params(SHEET_MODEL))
    r.claim("6N + 12Lhs in float64, N the checkpoint's count", per_token, 6.0 * checkpoint + attention, rel_tol=1e-12)
    r.claim(
        "attention's share = 12Lhs / (6N + 12Lhs), N the checkpoint's count",
        r.quantities["attention_share_7b"].value,
        attention / (6.0 * checkpoint + attention),
        rel_tol=1e-12,
    )


def _ring_factors(r: Result) -> None:
    """2(N-1)/N, the bytes each rank sends per byte of buffer in a ring all-reduce, checked on the ring simulator."""
    from distlab.data_parallel.ring_allreduce import traffic

    size = 4 * 1024 * 1024  # bytes, a multiple of every N below
    for n in RING_SIZES:
        factor = 2 * (n - 1) / n
        r.add(f"ring_factor_{n}", factor, "", f"2(N-1)/N at N = {n}")
        if n <= 64:  # the simulator moves every message; 1024 ranks is the closed form alone
            r.claim(
                f"ring all-reduce over {n} ranks: bytes sent per rank / buffer = 2(N-1)/N (simulated)",
                max(traffic(size, n, "ring").sent) / size,
                factor,
                rel_tol=1e-9,
            )


def _mfu_bands(r: Result) -> None:
    """What published runs reached: the MFU printed by every run of the corpus that prints one, by chip (bf16).
    The rows at each band's ends are recomputed from their published tokens/s with 6N + 12Lhs."""
    from distlab.gpu.flops import flops_per_token
    from distlab.hardware.gpus import gpu
    from distlab.planner.corpus import published_tokens_per_s_per_gpu, runs
    from distlab.planner.corpus_checks import corpus_claim

    corpus_claim(r)  # each printed MFU against its source's second printing, where one exists
    for chip in ("A100-SXM-80GB", "H100-SXM"):
        rows = [
            (run.row["mfu"], run)
            for run in runs().values()
            if "mfu" in run.row and run.row["gpu"] == chip and run.row.get("dtype", "bf16") == "bf16"
        ]
        key = chip.split("-")[0].lower()
        values = sorted(v for v, _ in rows)
        r.add(f"mfu_{key}_low", values[0], "fraction", f"{chip}, bf16: lowest published MFU")
        r.add(f"mfu_{key}_median", statistics.median(values), "fraction", f"{chip}, bf16: median")
        r.add(f"mfu_{key}_high", values[-1], "fraction", f"{chip}, bf16: highest")
        r.add(f"mfu_{key}_runs", len(values), "runs", f"{chip}, bf16: runs that print an MFU")
        r.claim(f"{chip}: the band is ordered", values[0], statistics.median(values), relation="<=")
        for label, (mfu, run) in (
            ("lowest", min(rows, key=lambda x: x[0])),
            ("highest", max(rows, key=lambda x: x[0])),
        ):
            row = run.row
            per_token = flops_per_token(row["params_billion"] * 1e9, row["layers"], row["hidden"], row["seq"])
            again = published_tokens_per_s_per_gpu(run) * per_token / gpu(chip).peak_flops("bf16")
            r.claim(
                f"{chip} {label} MFU ({run.key}) = its tokens/s x (6N + 12Lhs) / peak, within its FLOP convention",
                again,
                mfu,
                rel_tol=0.15,  # Megatron-Core counts the logits and GQA its own way: up to 13 % apart (chapter 13)
                unit="fraction",
            )
