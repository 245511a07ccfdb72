"""HBM traffic of standard attention and FlashAttention across N, d and M against the Theta forms
(experiment flash-attention-io), counted by distlab.attention.hbm_traffic.
"""

from __future__ import annotations

from distlab.attention.hbm_traffic import (
    BYTES,
    H100,
    fitted_exponent,
    flash2_forward,
    flash_backward,
    flash_backward_closed,
    flash_forward,
    flash_forward_closed,
    standard_forward,
    total,
)
from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import data_claims, gpu

# ---------------------------------------------------------------- experiment: traffic across N, d, M
SWEEP_N = [512, 1024, 2048, 4096, 8192, 16384]
SWEEP_D = [32, 64, 128, 256]
SWEEP_M_KIB = [16, 32, 64, 128, 228]
SWEEP_AT = 8192  # N for the d and M sweeps


@experiment(
    "flash-attention-io", "HBM traffic of standard vs FlashAttention, counted from the tiling loops", kind="simulated"
)
def flash_attention_io(device: str) -> Result:
    r = Result("flash-attention-io", kind="simulated")
    data_claims(r, [H100])  # M comes from its shared memory per SM
    sram = gpu(H100).smem_per_sm_bytes // BYTES  # M in elements: one SM's shared memory, bf16
    r.add("m_elements", sram, "elements", f"M: one {H100} SM's shared memory in bf16 elements")
    r.add("m_bytes", sram * BYTES, "B", f"one {H100} SM's shared memory")
    std = {n: total(standard_forward(n, 64)).elements for n in SWEEP_N}
    fa = {n: flash_forward(n, 64, sram).elements for n in SWEEP_N}
    fa2 = {n: flash2_forward(n, 64, sram).elements for n in SWEEP_N}
    for n in (97, 1000, 4096):  # awkward sizes too: ragged blocks
        for d in (64, 128):
            r.claim(
                f"Algorithm 1 loop = closed form (N={n}, d={d})",
                flash_forward(n, d, sram).elements,
                flash_forward_closed(n, d, sram),
                unit="elements",
                formula="3Nd + 2N + T_c(3Nd + 4N)",
            )
            r.claim(
                f"Algorithm 4 loop = closed form (N={n}, d={d})",
                flash_backward(n, d, sram).elements,
                flash_backward_closed(n, d, sram),
                unit="elements",
                formula="5Nd + T_c(5Nd + 2N)",
            )
    big = [n for n in SWEEP_N if n >= 2048]
    by_d = {d: flash_forward(SWEEP_AT, d, sram).elements for d in SWEEP_D}
    by_m = {k: flash_forward(SWEEP_AT, 64, k * 1024 // BYTES).elements for k in SWEEP_M_KIB}
    slopes = {
        "std_n": fitted_exponent(big, [std[n] for n in big]),
        "fa_n": fitted_exponent(big, [fa[n] for n in big]),
        "fa_d": fitted_exponent(SWEEP_D, list(by_d.values())),
        "fa_m": fitted_exponent(SWEEP_M_KIB, list(by_m.values())),
    }
    r.claim(
        "standard: traffic ~ N^2 (fitted exponent, N >= 2048)", slopes["std_n"], 2, abs_tol=0.1, formula="Θ(Nd + N^2)"
    )
    r.claim(
        "FlashAttention: traffic ~ N^2 (fitted exponent, N >= 2048)",
        slopes["fa_n"],
        2,
        abs_tol=0.15,
        formula="Θ(N^2 d^2 / M)",
    )
    r.claim(
        f"FlashAttention: traffic ~ d^2 (fitted exponent, N = {SWEEP_AT})",
        slopes["fa_d"],
        2,
        abs_tol=0.15,
        formula="Θ(N^2 d^2 / M)",
    )
    r.claim(
        f"FlashAttention: traffic ~ 1/M (fitted exponent, N = {SWEEP_AT})",
        slopes["fa_m"],
        -1,
        abs_tol=0.15,
        formula="Θ(N^2 d^2 / M)",
    )
    constant = fa[16384] / (16384**2 * 64**2 / sram)
    r.claim(
        "FlashAttention traffic / (N^2 d^2 / M) -> 12 (N = 16384, d = 64)",
        constant,
        12,
        rel_tol=0.1,
        formula="T_c ≈ 4Nd/M passes over Q and O (read Q, O; write O): 3 x 4 = 12",
    )
    for key, value in slopes.items():
        r.add(f"slope_{key}", value, "", f"fitted exponent {key}")
    r.add("theta_constant", constant, "", "FlashAttention traffic / (N^2 d^2 / M)")
    std_256 = total(standard_forward(SWEEP_AT, 256)).elements
    r.add("d256_fa_over_std", by_d[256] / std_256, "", f"Algorithm 1 / standard traffic at d=256, N={SWEEP_AT}")
    r.add("sweep_n", SWEEP_AT, "", "N of the d and M sweeps")
    r.add("theta_n", 16384, "", "N of the Θ-constant and the largest ratio")
    for n in (4096, 16384):
        r.add(f"std_over_fa_{n}", std[n] / fa[n], "", f"standard / FlashAttention forward traffic, N={n}, d=64")
        r.add(f"fa_over_fa2_{n}", fa[n] / fa2[n], "", f"Algorithm 1 / FlashAttention-2 order, N={n}, d=64")
    r.table(
        "by_n",
        ["N", "standard (Alg. 0)", "FlashAttention (Alg. 1)", "FlashAttention-2 order", "standard / Flash"],
        [
            [
                n,
                Quantity(std[n] * BYTES, "B"),
                Quantity(fa[n] * BYTES, "B"),
                Quantity(fa2[n] * BYTES, "B"),
                f"{std[n] / fa[n]:.1f}x",
            ]
            for n in SWEEP_N
        ],
        caption=f"Forward HBM traffic per head, d = 64, bf16, M = {sram * BYTES // 1024} KiB (one {H100} SM).",
    )
    _io_figure(r, std, fa, fa2, by_d, by_m, sram)
    return r


def _io_figure(r, std, fa, fa2, by_d, by_m, sram) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    ns = list(std)
    axes[0].loglog(ns, [std[n] * BYTES for n in ns], "o-", label="standard (Alg. 0)")
    axes[0].loglog(ns, [fa[n] * BYTES for n in ns], "s-", label="FlashAttention (Alg. 1)")
    axes[0].loglog(ns, [fa2[n] * BYTES for n in ns], "^-", label="FlashAttention-2 order")
    axes[0].set(xlabel="sequence length N", ylabel="HBM bytes (forward, per head)", title="vs N (d = 64)")
    std_d = {d: total(standard_forward(SWEEP_AT, d)).elements for d in by_d}
    axes[1].loglog(list(by_d), [std_d[d] * BYTES for d in by_d], "o-", label="standard")
    axes[1].loglog(list(by_d), [by_d[d] * BYTES for d in by_d], "s-", label="FlashAttention")
    axes[1].set(xlabel="head dim d", title=f"vs d (N = {SWEEP_AT})")
    axes[2].semilogy(list(by_m), [std[SWEEP_AT] * BYTES] * len(by_m), "o-", label="standard")
    axes[2].semilogy(list(by_m), [by_m[k] * BYTES for k in by_m], "s-", label="FlashAttention")
    axes[2].set(xlabel="SRAM M (KiB)", title=f"vs M (N = {SWEEP_AT}, d = 64)")
    axes[1].set_xticks(list(by_d), [str(d) for d in by_d])
    axes[1].minorticks_off()
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    r.figure(
        "traffic",
        fig,
        f"Forward HBM traffic per head in bf16, counted from the loops of Algorithms 0 "
        f"and 1 (default M = {sram * BYTES // 1024} KiB, one {H100} SM)",
    )
