"""HBM traffic of standard attention and FlashAttention across N, d and M against the Theta forms
(experiment flash-attention-io), counted by distlab.attention.hbm_traffic.
"""

from __future__ import annotations

import re

from distlab.attention import flash_attention_checks as checks
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
    _by_hand(r)
    kib = checks.smem_kib()
    for what, caption in (("table", r.tables["by_n"].caption), ("figure", r.figures["traffic"].caption)):
        shown = re.search(r"M = ([0-9.]+) KiB", caption)
        r.claim(f"the {what}'s caption: M = the datasheet's shared memory per SM", float(shown[1]) if shown else 0, kib)
    return r


def _by_hand(r: Result) -> None:
    """The table, the quoted ratios and slopes and the figure's curves against flash_attention_checks' closed forms
    (M from the datasheet's 228 KiB, slopes through statistics.linear_regression)."""
    m = checks.m_elements()
    q = {k: v.value for k, v in r.quantities.items()}
    r.claim("M in elements = 228 KiB / 2 B", q["m_elements"], m, unit="elements")
    r.claim("M in bytes = 228 KiB", q["m_bytes"], 2 * m, unit="B")
    rows = r.tables["by_n"].rows
    expected = []
    for row in rows:
        n = row[0]
        std, fa = checks.standard_forward_elements(n, 64), checks.flash_kernels(n, 64, m)[0][0]
        expected.append((n, 2 * std, 2 * fa, 2 * checks.flash2_forward_elements(n, 64, m), std / fa))
    shown = [(row[0], row[1].value, row[2].value, row[3].value, float(row[4].rstrip("x"))) for row in rows]
    r.claim(
        "table by_n: every byte count against the closed forms (largest gap)",
        checks.gap([(a, b) for s, e in zip(shown, expected) for a, b in zip(s[1:4], e[1:4])]),
        0.0,
        abs_tol=1e-12,
        formula="4Nd + 4N^2; 3Nd + 2N + T_c(3Nd + 4N); 2Nd + N + ⌈N/B⌉ 2Nd",
    )
    r.claim(
        "table by_n: every printed ratio within half its last digit",
        max(abs(s[4] - e[4]) for s, e in zip(shown, expected)),
        0.05,
        relation="<=",
    )
    for n in (4096, 16384):
        std, fa = checks.standard_forward_elements(n, 64), checks.flash_kernels(n, 64, m)[0][0]
        r.claim(f"standard / Flash at N={n}, by hand", q[f"std_over_fa_{n}"], std / fa, rel_tol=1e-9)
        fa2 = checks.flash2_forward_elements(n, 64, m)
        r.claim(f"Alg. 1 / FlashAttention-2 order at N={n}, by hand", q[f"fa_over_fa2_{n}"], fa / fa2, rel_tol=1e-9)
    n_at, n_theta = int(q["sweep_n"]), int(q["theta_n"])
    fa_256 = checks.flash_kernels(n_at, 256, m)[0][0]
    r.claim(
        f"Alg. 1 / standard at d=256, N={n_at}, by hand",
        q["d256_fa_over_std"],
        fa_256 / checks.standard_forward_elements(n_at, 256),
        rel_tol=1e-9,
    )
    r.claim(
        f"Θ constant at N={n_theta}, d=64, by hand",
        q["theta_constant"],
        checks.flash_kernels(n_theta, 64, m)[0][0] / (n_theta**2 * 64**2 / m),
        rel_tol=1e-9,
    )
    big = [n for n in SWEEP_N if n >= 2048]
    slopes = {
        "std_n": checks.loglog_slope(big, [checks.standard_forward_elements(n, 64) for n in big]),
        "fa_n": checks.loglog_slope(big, [checks.flash_kernels(n, 64, m)[0][0] for n in big]),
        "fa_d": checks.loglog_slope(SWEEP_D, [checks.flash_kernels(n_at, d, m)[0][0] for d in SWEEP_D]),
        "fa_m": checks.loglog_slope(SWEEP_M_KIB, [checks.flash_kernels(n_at, 64, k * 512)[0][0] for k in SWEEP_M_KIB]),
    }
    for key, slope in slopes.items():
        r.claim(f"fitted exponent {key}, re-fitted on the closed forms", q[f"slope_{key}"], slope, rel_tol=1e-9)


def _read_back(r, axes, sram) -> None:
    """Every drawn point against the closed forms (bytes = 2 x elements)."""
    m = checks.m_elements()
    refs = {
        (0, "standard (Alg. 0)"): lambda x: checks.standard_forward_elements(int(x), 64),
        (0, "FlashAttention (Alg. 1)"): lambda x: checks.flash_kernels(int(x), 64, m)[0][0],
        (0, "FlashAttention-2 order"): lambda x: checks.flash2_forward_elements(int(x), 64, m),
        (1, "standard"): lambda x: checks.standard_forward_elements(SWEEP_AT, int(x)),
        (1, "FlashAttention"): lambda x: checks.flash_kernels(SWEEP_AT, int(x), m)[0][0],
        (2, "standard"): lambda x: checks.standard_forward_elements(SWEEP_AT, 64),
        (2, "FlashAttention"): lambda x: checks.flash_kernels(SWEEP_AT, 64, int(x) * 512)[0][0],
    }
    pairs, drawn = [], 0
    for (i, label), ref in refs.items():
        (line,) = [ln for ln in axes[i].get_lines() if ln.get_label() == label]
        pairs += [(y, 2 * ref(x)) for x, y in zip(line.get_xdata(), line.get_ydata())]
        drawn += len(line.get_xdata())
    r.claim(
        "figure traffic: every point drawn against the closed forms (largest gap)",
        checks.gap(pairs),
        0.0,
        abs_tol=1e-12,
    )
    r.claim(
        "figure traffic: points drawn = the sweeps' sizes",
        drawn,
        3 * len(SWEEP_N) + 2 * len(SWEEP_D) + 2 * len(SWEEP_M_KIB),
    )


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
    _read_back(r, axes, sram)
    r.claim("figure traffic: one panel per sweep (N, d, M)", len(fig.axes), 3)
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
