"""HBM traffic and FLOPs of attention, counted from the algorithms' own loops.

Dao et al. 2022 (FlashAttention, arXiv:2205.14135), Theorem 2 and 5: with an on-chip SRAM of M elements
(d <= M <= N d), standard attention (their Algorithms 0 and 3) reads and writes Θ(N d + N^2) elements of
HBM, FlashAttention (Algorithms 1 and 4) Θ(N^2 d^2 / M). Here every load and store of those algorithms
is counted as it happens in the block loops, per head, in elements (x bytes per element for bytes), and
so are the matrix-multiply FLOPs and the exponentials. Block sizes are the paper's: B_c = ceil(M / 4d),
B_r = min(B_c, d). `flash2_forward` is the same work in FlashAttention-2's loop order (queries outside,
keys inside), which reads Q and writes O once instead of once per key block.

Experiments: `flash-attention-io` (traffic across N, d and M against the Θ forms) and
`flash-attention-flops` (why FlashAttention is faster although it does more FLOPs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distlab.experiments import experiment
from distlab.facts import fact
from distlab.hardware import gpu
from distlab.results import Quantity, Result


@dataclass(frozen=True)
class Traffic:
    """HBM elements read and written, matrix-multiply FLOPs and exponentials of one step, or a sum."""

    reads: int = 0
    writes: int = 0
    matmul_flops: int = 0
    exps: int = 0

    @property
    def elements(self) -> int:
        return self.reads + self.writes

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.reads + other.reads, self.writes + other.writes,
                       self.matmul_flops + other.matmul_flops, self.exps + other.exps)


def fitted_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x: y ~ x^slope."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def total(steps) -> Traffic:
    return sum((t for _, t in steps), Traffic())


def fa1_blocks(n: int, d: int, m: int) -> tuple[int, int]:
    """(B_r, B_c) of Algorithm 1 for SRAM of m elements: K_j, V_j, Q_i, O_i and S_ij fit on chip.
    (Theorem 2's Θ form assumes d <= M <= N d; above N d a single block holds all of K and V.)"""
    if n < 1 or d < 1 or m < d:
        raise ValueError(f"need N >= 1, d >= 1 and M >= d; got N={n}, d={d}, M={m} elements")
    bc = math.ceil(m / (4 * d))
    return min(bc, d), bc


def _blocks(n: int, size: int):
    """Row counts of the blocks that split n rows into pieces of `size` (the last one ragged)."""
    return [min(size, n - start) for start in range(0, n, size)]


# ---------------------------------------------------------------- standard attention (S and P in HBM)
def standard_forward(n: int, d: int) -> list[tuple[str, Traffic]]:
    """Algorithm 0, one step per line: S = Q K^T, P = softmax(S), O = P V."""
    return [("S = QK^T", Traffic(reads=2 * n * d, writes=n * n, matmul_flops=2 * n * n * d)),
            ("P = softmax(S)", Traffic(reads=n * n, writes=n * n, exps=n * n)),
            ("O = PV", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d))]


def standard_backward(n: int, d: int) -> list[tuple[str, Traffic]]:
    """Algorithm 3: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K, dK = dS^T Q."""
    return [("dV = P^T dO", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d)),
            ("dP = dO V^T", Traffic(reads=2 * n * d, writes=n * n, matmul_flops=2 * n * n * d)),
            ("dS", Traffic(reads=2 * n * n, writes=n * n)),
            ("dQ = dS K", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d)),
            ("dK = dS^T Q", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d))]


# ---------------------------------------------------------------- FlashAttention, counted in the loops
def flash_forward(n: int, d: int, m: int) -> Traffic:
    """Algorithm 1: for each K/V block j, stream every Q/O/l/m block i through SRAM."""
    br, bc = fa1_blocks(n, d, m)
    reads, writes, flops, exps = 0, n * d + 2 * n, 0, 0  # line 2: O = 0, l = 0, m = -inf set in HBM
    for cols in _blocks(n, bc):
        reads += 2 * cols * d  # line 6: K_j, V_j
        for rows in _blocks(n, br):
            reads += 2 * rows * d + 2 * rows  # line 8: Q_i, O_i, l_i, m_i
            writes += rows * d + 2 * rows  # lines 12-13: O_i, l_i, m_i
            flops += 4 * rows * cols * d  # S_ij = Q_i K_j^T and P_ij V_j
            exps += rows * cols
    return Traffic(reads, writes, flops, exps)


def flash_backward(n: int, d: int, m: int) -> Traffic:
    """Algorithm 4: for each K/V block j, stream Q, O, dO, dQ, l, m blocks; P recomputed on chip."""
    br, bc = fa1_blocks(n, d, m)
    reads, writes, flops, exps = 0, n * d, 0, 0  # line 5: dQ = 0 in HBM (dK_j, dV_j live on chip)
    for cols in _blocks(n, bc):
        reads += 2 * cols * d  # line 7: K_j, V_j
        writes += 2 * cols * d  # line 24: dK_j, dV_j, once
        for rows in _blocks(n, br):
            reads += 4 * rows * d + 2 * rows  # line 10: Q_i, O_i, dO_i, dQ_i, l_i, m_i
            writes += rows * d  # line 21: dQ_i
            flops += 10 * rows * cols * d  # S (recomputed), dV, dP, dQ, dK
            exps += rows * cols
    return Traffic(reads, writes, flops, exps)


def flash2_forward(n: int, d: int, m: int) -> Traffic:
    """FlashAttention-2's order: each Q block stays on chip while every K/V block streams past it; O and
    the log-sum-exp are written once. Blocks mirror Algorithm 1's with the roles of rows and keys swapped."""
    bc, br = fa1_blocks(n, d, m)
    reads, writes, flops, exps = 0, 0, 0, 0
    for rows in _blocks(n, br):
        reads += rows * d  # Q_i, once
        writes += rows * d + rows  # O_i and L_i, once
        for cols in _blocks(n, bc):
            reads += 2 * cols * d  # K_j, V_j, once per query block
            flops += 4 * rows * cols * d
            exps += rows * cols
    return Traffic(reads, writes, flops, exps)


def flash_forward_closed(n: int, d: int, m: int) -> int:
    """Elements moved by Algorithm 1: 3Nd + 2N + T_c (3Nd + 4N), T_c = ceil(N / B_c); ~12 N^2 d^2 / M."""
    tc = math.ceil(n / fa1_blocks(n, d, m)[1])
    return 3 * n * d + 2 * n + tc * (3 * n * d + 4 * n)


def flash_backward_closed(n: int, d: int, m: int) -> int:
    """Elements moved by Algorithm 4: 5Nd + T_c (5Nd + 2N); ~20 N^2 d^2 / M."""
    tc = math.ceil(n / fa1_blocks(n, d, m)[1])
    return 5 * n * d + tc * (5 * n * d + 2 * n)


# ---------------------------------------------------------------- experiment: traffic across N, d, M
H100 = "H100-SXM"
BYTES = 2  # bf16 / fp16 elements
SWEEP_N = [512, 1024, 2048, 4096, 8192, 16384]
SWEEP_D = [32, 64, 128, 256]
SWEEP_M_KIB = [16, 32, 64, 128, 228]
SWEEP_AT = 8192  # N for the d and M sweeps


@experiment("flash-attention-io", "HBM traffic of standard vs FlashAttention, counted from the tiling loops",
            kind="simulated")
def flash_attention_io(device: str) -> Result:
    r = Result("flash-attention-io", kind="simulated")
    sram = gpu(H100).smem_per_sm_bytes // BYTES  # M in elements: one SM's shared memory, bf16
    r.add("m_elements", sram, "elements", f"M: one {H100} SM's shared memory in bf16 elements")
    r.add("m_bytes", sram * BYTES, "B", f"one {H100} SM's shared memory")
    std = {n: total(standard_forward(n, 64)).elements for n in SWEEP_N}
    fa = {n: flash_forward(n, 64, sram).elements for n in SWEEP_N}
    fa2 = {n: flash2_forward(n, 64, sram).elements for n in SWEEP_N}
    for n in (97, 1000, 4096):  # awkward sizes too: ragged blocks
        for d in (64, 128):
            r.claim(f"Algorithm 1 loop = closed form (N={n}, d={d})", flash_forward(n, d, sram).elements,
                    flash_forward_closed(n, d, sram), unit="elements", formula="3Nd + 2N + T_c(3Nd + 4N)")
            r.claim(f"Algorithm 4 loop = closed form (N={n}, d={d})", flash_backward(n, d, sram).elements,
                    flash_backward_closed(n, d, sram), unit="elements", formula="5Nd + T_c(5Nd + 2N)")
    big = [n for n in SWEEP_N if n >= 2048]
    by_d = {d: flash_forward(SWEEP_AT, d, sram).elements for d in SWEEP_D}
    by_m = {k: flash_forward(SWEEP_AT, 64, k * 1024 // BYTES).elements for k in SWEEP_M_KIB}
    slopes = {"std_n": fitted_exponent(big, [std[n] for n in big]),
              "fa_n": fitted_exponent(big, [fa[n] for n in big]),
              "fa_d": fitted_exponent(SWEEP_D, list(by_d.values())),
              "fa_m": fitted_exponent(SWEEP_M_KIB, list(by_m.values()))}
    r.claim("standard: traffic ~ N^2 (fitted exponent, N >= 2048)", slopes["std_n"], 2, abs_tol=0.1,
            formula="Θ(Nd + N^2)")
    r.claim("FlashAttention: traffic ~ N^2 (fitted exponent, N >= 2048)", slopes["fa_n"], 2, abs_tol=0.15,
            formula="Θ(N^2 d^2 / M)")
    r.claim(f"FlashAttention: traffic ~ d^2 (fitted exponent, N = {SWEEP_AT})", slopes["fa_d"], 2, abs_tol=0.15,
            formula="Θ(N^2 d^2 / M)")
    r.claim(f"FlashAttention: traffic ~ 1/M (fitted exponent, N = {SWEEP_AT})", slopes["fa_m"], -1, abs_tol=0.15,
            formula="Θ(N^2 d^2 / M)")
    constant = fa[16384] / (16384**2 * 64**2 / sram)
    r.claim("FlashAttention traffic / (N^2 d^2 / M) -> 12 (N = 16384, d = 64)", constant, 12, rel_tol=0.1,
            formula="T_c ≈ 4Nd/M passes over Q and O (read Q, O; write O): 3 x 4 = 12")
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
    r.table("by_n", ["N", "standard (Alg. 0)", "FlashAttention (Alg. 1)", "FlashAttention-2 order",
                     "standard / Flash"],
            [[n, Quantity(std[n] * BYTES, "B"), Quantity(fa[n] * BYTES, "B"), Quantity(fa2[n] * BYTES, "B"),
              f"{std[n] / fa[n]:.1f}x"] for n in SWEEP_N],
            caption=f"Forward HBM traffic per head, d = 64, bf16, M = {sram * BYTES // 1024} KiB (one {H100} SM).")
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
    r.figure("traffic", fig, f"Forward HBM traffic per head in bf16, counted from the loops of Algorithms 0 "
             f"and 1 (default M = {sram * BYTES // 1024} KiB, one {H100} SM)")


# ---------------------------------------------------------------- experiment: more FLOPs, yet faster
def roofline_seconds(steps, peak: float, bandwidth: float) -> float:
    """Each kernel takes at least max(FLOPs / peak, bytes / bandwidth); kernels run one after another."""
    return sum(max(t.matmul_flops / peak, t.elements * BYTES / bandwidth) for _, t in steps)


FLOPS_N = [1024, 2048, 4096, 8192, 16384]
TOKENS, WIDTH = 16384, 2048  # batch x N and heads x d of the benchmark (the FlashAttention-2 paper's setup)


@experiment("flash-attention-flops", "FLOPs, HBM bytes, intensity and roofline time: standard vs FlashAttention",
            kind="computed")
def flash_attention_flops(device: str) -> Result:
    r = Result("flash-attention-flops", kind="computed")
    chip = gpu(H100)
    peak, bw = chip.peak_flops("bf16"), chip.hbm_bytes_per_s
    sram = chip.smem_per_sm_bytes // BYTES
    rows, points, flop_ratios, speedups, std_intensities = [], [], [], [], []
    for d in (64, 128):
        for n in FLOPS_N:
            heads = (TOKENS // n) * (WIDTH // d)  # batch x heads
            std_steps = standard_forward(n, d) + standard_backward(n, d)
            fa_steps = [("forward", flash_forward(n, d, sram)), ("backward", flash_backward(n, d, sram))]
            std, fa = total(std_steps), total(fa_steps)
            t_std = heads * roofline_seconds(std_steps, peak, bw)
            t_fa = heads * roofline_seconds(fa_steps, peak, bw)
            i_std = std.matmul_flops / (std.elements * BYTES)
            i_fa = fa.matmul_flops / (fa.elements * BYTES)
            points.append((d, n, i_std, i_fa))
            rows.append([d, n, Quantity(heads * std.matmul_flops, "FLOP"), Quantity(heads * fa.matmul_flops, "FLOP"),
                         Quantity(heads * std.elements * BYTES, "B"), Quantity(heads * fa.elements * BYTES, "B"),
                         f"{i_std:.0f}", f"{i_fa:.0f}", Quantity(t_std, "s"), Quantity(t_fa, "s"),
                         f"{t_std / t_fa:.1f}x"])
            flop_ratios.append(fa.matmul_flops / std.matmul_flops)
            speedups.append(t_std / t_fa)
            std_intensities.append(i_std)
            if n == 4096:
                key = f"d{d}"
                r.add(f"{key}_flop_ratio", fa.matmul_flops / std.matmul_flops, "", "FlashAttention / standard FLOPs")
                r.add(f"{key}_byte_ratio", std.elements / fa.elements, "", "standard / FlashAttention HBM bytes")
                r.add(f"{key}_intensity_std", i_std, "FLOP/B", "standard attention, fwd+bwd intensity")
                r.add(f"{key}_intensity_fa", i_fa, "FLOP/B", "FlashAttention, fwd+bwd intensity")
                r.add(f"{key}_time_std", t_std, "s", "standard attention, roofline time, fwd+bwd")
                r.add(f"{key}_time_fa", t_fa, "s", "FlashAttention, roofline time, fwd+bwd")
                r.add(f"{key}_speedup", t_std / t_fa, "", "roofline speed-up of FlashAttention")
    r.table("roofline", ["d", "N", "FLOPs std", "FLOPs Flash", "HBM std", "HBM Flash", "FLOP/B std",
                         "FLOP/B Flash", "time std", "time Flash", "speed-up"], rows,
            caption=f"Forward + backward over {TOKENS:,} tokens and width {WIDTH} (batch x N and heads x d fixed), "
                    f"bf16, matmul FLOPs only, {chip.name}: roofline lower bounds on time, kernel by kernel.")
    shapes = f"all {len(rows)} shapes (d = 64 and 128, N = {FLOPS_N[0]} to {FLOPS_N[-1]})"
    worst = max(flop_ratios, key=lambda x: abs(x - 14 / 12))
    r.claim(f"FlashAttention does 7/6 the matmul FLOPs of standard attention (worst of {shapes})", worst, 14 / 12,
            rel_tol=1e-12, formula="(4 + 10) N^2 d / (4 + 8) N^2 d: the backward recomputes S = QK^T")
    r.claim(f"yet its roofline time is shorter: smallest speed-up, {shapes}", min(speedups), 1.0, relation=">=",
            formula="sum over kernels of max(FLOPs / peak, bytes / bandwidth)")
    r.claim(f"standard attention is memory-bound: largest intensity, {shapes}", max(std_intensities),
            chip.ridge("bf16"), relation="<=", unit="FLOP/B", formula="below the bf16 ridge point")
    r.add("ridge_bf16", chip.ridge("bf16"), "FLOP/B", f"{chip.name} bf16 ridge point")
    r.add("focus_n", 4096, "", "N of the d64_* and d128_* quantities")
    r.add("m_bytes", sram * BYTES, "B", "SRAM per SM used as M")
    _published(r, chip)
    _worked(r, chip)
    _roofline_figure(r, chip, points)
    return r


WP_SEQ = 8192  # worked problem: fine-tuning Llama 2 7B at 8k context, micro-batch 1, bf16


def _worked(r: Result, chip) -> None:
    from distlab.model_shapes import preset

    model = preset("7B")
    n, heads, d = WP_SEQ, model.heads, model.head_dim
    r.add("wp_seq", n, "tokens", "worked problem: sequence length")
    r.add("wp_heads", heads, "", "Llama 2 7B heads")
    r.add("wp_head_dim", d, "", "Llama 2 7B head dim")
    r.add("wp_layers", model.layers, "", "Llama 2 7B layers")
    r.add("wp_p_bytes_layer", heads * n * n * BYTES, "B", "one layer's P (heads x N x N, bf16)")
    r.add("wp_p_bytes_model", model.layers * heads * n * n * BYTES, "B", "P of every layer, kept for backward")
    r.add("wp_lse_bytes_model", model.layers * heads * n * 4, "B", "FlashAttention's saved L (fp32), all layers")
    causal = 4 * n * n * d * heads / 2
    r.add("wp_fwd_flops_layer", causal, "FLOP", "causal attention forward, one layer (4 N^2 d H / 2)")
    r.add("wp_fwd_seconds_layer", causal / chip.peak_flops("bf16"), "s", "... at the bf16 peak")
    for name, key in (("fa3", "fp16_peak_fraction"), ("fa2", "fa2_h100_peak_fraction")):
        fraction = fact(f"flash_attention.FA3.{key}").value
        r.add(f"wp_fwd_seconds_{name}", causal / chip.peak_flops("bf16") / fraction, "s",
              f"... at {name}'s published fraction of the H100 peak")
    fp8 = (1 / (fact("flash_attention.FA3.h100_exp_tflops").value * 1e12)) / (4 * 128 / chip.peak_flops("fp8"))
    r.add("exp_over_matmul_fp8_d128", fp8, "fraction", "exp time / matmul time in fp8, d=128")


def _published(r: Result, chip) -> None:
    """FlashAttention paper, Figure 2: GPT-2 medium on an A100; FlashAttention-3: exp vs matmul throughput."""
    fig2 = {k: fact(f"flash_attention.FA1-fig2.{k}").value
            for k in ("std_gflops", "fa_gflops", "std_hbm_gb", "fa_hbm_gb", "std_ms", "fa_ms")}
    n, d = fact("flash_attention.FA1-fig2.seq").value, fact("flash_attention.FA1-fig2.head_dim").value
    heads = fact("flash_attention.FA1-fig2.heads").value * fact("flash_attention.FA1-fig2.batch").value
    a100 = fact("flash_attention.FA1.a100_sram_kb_per_sm").value * 1024 // BYTES  # the paper's M
    std = heads * (total(standard_forward(n, d)) + total(standard_backward(n, d))).elements * BYTES
    fa = heads * (flash_forward(n, d, a100) + flash_backward(n, d, a100)).elements * BYTES
    r.add("gpt2_std_hbm", std, "B", "standard attention HBM traffic, counted (Alg. 0 + 3)")
    r.add("gpt2_fa_hbm", fa, "B", "FlashAttention HBM traffic, counted (Alg. 1 + 4)")
    r.add("gpt2_published_flop_ratio", fig2["fa_gflops"] / fig2["std_gflops"], "", "published FLOP ratio")
    r.add("gpt2_published_time_ratio", fig2["std_ms"] / fig2["fa_ms"], "", "published speed-up")
    r.add("gpt2_published_byte_ratio", fig2["std_hbm_gb"] / fig2["fa_hbm_gb"], "", "published HBM ratio")
    r.claim("GPT-2 medium: counted FlashAttention traffic vs published 4.4 GB", fa, fig2["fa_hbm_gb"] * 1e9,
            rel_tol=0.15, unit="B", formula="Alg. 1 + 4, M = the paper's 192 KB of SRAM per A100 SM, fp16")
    r.claim("GPT-2 medium: counted standard traffic is a floor for the published 40.3 GB", std,
            fig2["std_hbm_gb"] * 1e9, relation="<=", unit="B",
            formula="Alg. 0 + 3 only; the measured run also masks and applies dropout in separate passes")
    r.claim("GPT-2 medium: recompute FLOP ratio matches the published one", 14 / 12,
            fig2["fa_gflops"] / fig2["std_gflops"], rel_tol=0.05, formula="(4 + 10) / (4 + 8)")
    exp_rate = fact("flash_attention.FA3.h100_exp_tflops").value * 1e12
    for d in (64, 128):
        # per score: 4d matmul FLOPs (QK^T and PV) and one exponential
        share = (1 / exp_rate) / (4 * d / chip.peak_flops("fp16"))
        r.add(f"exp_over_matmul_d{d}", share, "fraction", f"exp time / matmul time, forward, d={d}")
        r.add(f"serial_cap_d{d}", 1 / (1 + share), "fraction", f"share of peak if exp and matmul never overlap, d={d}")
    r.claim("FlashAttention-3: exponentials take ~50% of matmul time at d=128", r.quantities[
        "exp_over_matmul_d128"].value, 0.5, rel_tol=0.02, formula="(1 / 3.9 TFLOP/s) / (512 / 989 TFLOP/s)")


def _roofline_figure(r: Result, chip, points) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peak, bw = chip.peak_flops("bf16"), chip.hbm_bytes_per_s
    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs = sorted([2 ** (k / 8) for k in range(24, 89)] + [chip.ridge("bf16")])
    ax.loglog(xs, [min(peak, x * bw) / 1e12 for x in xs], "k-", lw=1, label=f"{chip.name} bf16 roofline")
    for d, marker in ((64, "o"), (128, "s")):
        pts = [p for p in points if p[0] == d]
        ax.loglog([p[2] for p in pts], [min(peak, p[2] * bw) / 1e12 for p in pts], marker, color="C3",
                  label=f"standard, d={d}")
        ax.loglog([p[3] for p in pts], [min(peak, p[3] * bw) / 1e12 for p in pts], marker, color="C0",
                  label=f"FlashAttention, d={d}")
    ax.axvline(chip.ridge("bf16"), color="gray", ls=":", lw=1)
    ax.set(xlabel="arithmetic intensity (matmul FLOP per HBM byte, fwd+bwd)", ylabel="attainable TFLOP/s")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    r.figure("roofline", fig, f"Attention forward + backward on the {chip.name} bf16 roofline, N from "
             f"{FLOPS_N[0]} to {FLOPS_N[-1]} (dotted: ridge point)")
