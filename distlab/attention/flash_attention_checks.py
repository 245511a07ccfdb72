"""Chapter 8's roofline numbers worked by hand, apart from distlab.attention.hbm_traffic's step lists and loops:
the paper's per-kernel traffic of Algorithms 0 + 3 typed out kernel by kernel, FlashAttention's closed forms of
Algorithms 1 + 4 (Dao et al. 2022, Theorem 2's proof), the H100's peaks read straight from gpus.toml's datasheet
fields (not through distlab.hardware.gpus), and Llama 2 7B's shape from its released config.json.

Each function returns float64 references the flash-attention-flops experiment claims its table, quantities and
figure against.
"""

from __future__ import annotations

import math

from distlab.core.facts import value

# Llama 2 7B's released config.json (meta-llama/Llama-2-7b-hf): num_attention_heads, hidden_size / heads,
# num_hidden_layers
LLAMA2_7B = {"heads": 32, "head_dim": 4096 // 32, "layers": 32}


def h100(dtype: str = "bf16") -> tuple[float, float]:
    """(dense FLOP/s, HBM bytes/s) of the H100 SXM from the datasheet fields themselves."""
    return value(f"gpus.H100-SXM.{dtype}_dense_tflops") * 1e12, value("gpus.H100-SXM.hbm_tbps") * 1e12


def smem_kib() -> float:
    """One H100 SM's shared memory in KiB, the datasheet field."""
    return value("gpus.H100-SXM.smem_per_sm_kib")


def m_elements() -> int:
    """M: one H100 SM's shared memory (228 KiB) in 2-byte elements."""
    return int(value("gpus.H100-SXM.smem_per_sm_kib")) * 1024 // 2


def standard_kernels(n: int, d: int) -> list[tuple[float, float]]:
    """(HBM elements, matmul FLOPs) of each kernel of Algorithms 0 and 3, one per line of the paper:
    S = QK^T, softmax, O = PV; dV = P^T dO, dP = dO V^T, dS, dQ = dS K, dK = dS^T Q."""
    nn, nd, mm = float(n) * n, float(n) * d, 2.0 * n * n * d
    return [
        (nn + 2 * nd, mm),  # read Q, K; write S
        (2 * nn, 0.0),  # read S; write P
        (nn + 2 * nd, mm),  # read P, V; write O
        (nn + 2 * nd, mm),  # read P, dO; write dV
        (nn + 2 * nd, mm),  # read dO, V; write dP
        (3 * nn, 0.0),  # read P, dP; write dS
        (nn + 2 * nd, mm),  # read dS, K; write dQ
        (nn + 2 * nd, mm),  # read dS, Q; write dK
    ]


def flash_kernels(n: int, d: int, m: int) -> list[tuple[float, float]]:
    """(HBM elements, matmul FLOPs) of FlashAttention's two kernels: Algorithm 1 moves 3Nd + 2N + T_c (3Nd + 4N)
    elements for 4 N^2 d FLOPs, Algorithm 4 5Nd + T_c (5Nd + 2N) for 10 N^2 d (S recomputed), T_c = ⌈N / ⌈M/4d⌉⌉."""
    tc = -(-n // -(-m // (4 * d)))
    fwd = 3.0 * n * d + 2 * n + tc * (3.0 * n * d + 4 * n)
    bwd = 5.0 * n * d + tc * (5.0 * n * d + 2 * n)
    return [(fwd, 4.0 * n * n * d), (bwd, 10.0 * n * n * d)]


def row(n: int, d: int, tokens: int, width: int) -> dict[str, float]:
    """One row of the roofline table: every batch x head of `tokens` x `width` runs the kernels one after another;
    each kernel takes max(FLOPs / peak, bytes / bandwidth)."""
    peak, bw = h100()
    copies = tokens * width / (n * d)  # (batch x N) x (heads x d) / (N d): batch x heads
    out = {}
    for name, kernels in (("std", standard_kernels(n, d)), ("fa", flash_kernels(n, d, m_elements()))):
        elements, flops = sum(k[0] for k in kernels), sum(k[1] for k in kernels)
        out[f"flops_{name}"] = copies * flops
        out[f"bytes_{name}"] = copies * elements * 2
        out[f"intensity_{name}"] = flops / (elements * 2)
        out[f"time_{name}"] = copies * sum(max(f / peak, 2 * e / bw) for e, f in kernels)
    out["speedup"] = out["time_std"] / out["time_fa"]
    return out


def gpt2_standard_bytes(seq: int, head_dim: int, heads: int, batch: int) -> float:
    """Algorithms 0 + 3 for Figure 2's GPT-2 medium run, fp16, from the kernels above."""
    return heads * batch * 2.0 * sum(k[0] for k in standard_kernels(seq, head_dim))


def exp_share(d: int, dtype: str = "fp16") -> float:
    """Exponential time over matmul time per score: one exp at FlashAttention-3's 3.9 TFLOP/s of MUFU against 4d
    matmul FLOPs (QK^T and PV) at the dense peak of `dtype`."""
    peak = value(f"gpus.H100-SXM.{dtype}_dense_tflops") * 1e12
    return peak / (4.0 * d * value("flash_attention.FA3.h100_exp_tflops") * 1e12)


def serial_cap(d: int) -> float:
    """Share of the matmul peak left when exponentials and matmuls never overlap: t_matmul / (t_matmul + t_exp)."""
    t_mm = 4.0 * d / (value("gpus.H100-SXM.fp16_dense_tflops") * 1e12)
    t_exp = 1.0 / (value("flash_attention.FA3.h100_exp_tflops") * 1e12)
    return t_mm / (t_mm + t_exp)


def llama2_7b_worked(seq: int) -> dict[str, float]:
    """The worked problem (one 7B sequence of `seq` tokens, bf16) by hand from config.json's shape."""
    h, d, layers = LLAMA2_7B["heads"], LLAMA2_7B["head_dim"], LLAMA2_7B["layers"]
    peak = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    scores = float(seq) * seq * h  # one layer's N x N per head
    causal_flops = 0.5 * (2 * 2 * scores * d)  # QK^T and PV, 2 FLOPs per multiply-add, half the scores causal
    return {
        "wp_heads": h,
        "wp_head_dim": d,
        "wp_layers": layers,
        "wp_p_bytes_layer": 2 * scores,
        "wp_p_bytes_model": 2 * scores * layers,
        "wp_lse_bytes_model": 4.0 * seq * h * layers,
        "wp_fwd_flops_layer": causal_flops,
        "wp_fwd_seconds_layer": causal_flops / peak,
        "wp_fwd_seconds_fa3": causal_flops / (peak * value("flash_attention.FA3.fp16_peak_fraction")),
        "wp_fwd_seconds_fa2": causal_flops / (peak * value("flash_attention.FA3.fa2_h100_peak_fraction")),
    }


def gap(pairs) -> float:
    """Largest relative gap of shown from expected over the pairs."""
    return max(abs(a - b) / abs(b) if b else abs(a) for a, b in pairs)


def standard_forward_elements(n: int, d: int) -> float:
    """Algorithm 0's HBM elements by hand: reads Q, K (2Nd), S for the softmax
    (N^2), P and V for O = PV (N^2 + Nd), writes S, P (2N^2) and O (Nd): 4Nd + 4N^2."""
    return 4.0 * n * d + 4.0 * n * n


def flash2_forward_elements(n: int, d: int, m: int) -> float:
    """FlashAttention-2's order by hand: Q read once (Nd), O and L written once (Nd + N), and all of K and V
    (2Nd) read once per query block of ⌈M/4d⌉ rows."""
    blocks = -(-n // -(-m // (4 * d)))
    return 2.0 * n * d + n + blocks * 2.0 * n * d


def loglog_slope(xs, ys) -> float:
    """The least-squares exponent through statistics.linear_regression (not hbm_traffic.fitted_exponent)."""
    import statistics

    return statistics.linear_regression([math.log(x) for x in xs], [math.log(y) for y in ys]).slope


def online_rescales(scores: list[list[float]], block: int, threshold_log2: float) -> int:
    """Rescales of the online softmax counted row by row in plain Python: after the first block, one each time a
    block's largest score (in log2 units, x / ln 2) exceeds the running max by more than the threshold."""
    count = 0
    for row in scores:
        running = None
        for j in range(0, len(row), block):
            top = max(row[j : j + block]) / math.log(2)
            if running is None:
                running = top
            elif top > running + threshold_log2:
                count, running = count + 1, top
    return count


def exp2_poly_rel_error(coeffs: list[float], xs: list[float]) -> float:
    """Worst relative error of 2^floor(x) p(x - floor(x)) against 2^x in plain Python: the power of two is exact,
    so it is |p(f) - 2^f| / 2^f at each point's fraction f (p by Horner's rule)."""
    worst = 0.0
    for x in xs:
        f = x - math.floor(x)
        p = 0.0
        for c in reversed(coeffs):
            p = p * f + c
        worst = max(worst, abs(p - 2.0**f) / 2.0**f)
    return worst


# ---------------------------------------------------------------- flash-attention-exact and -memory, by hand
MANTISSA_BITS = {"fp32": 24, "bf16": 8, "fp16": 11}
"""Significand bits (the implicit one included) of each format: IEEE 754 binary32 and binary16, and bfloat16
(binary32's exponent with 8 significand bits)."""


def rounding_slack(references, fmt: str) -> float:
    """The FlashAttention repository's slack, twice max |(x + 0.3) - 0.3 - x| in `fmt`, with the format's rounding
    written out (round to nearest, ties to even, on float64 arrays) instead of calling a dtype cast. As PyTorch
    computes a low-precision op with a Python scalar: in float32 with float32(0.3), then rounded to the format."""
    import numpy as np

    def rnd(x, bits: int):
        m, e = np.frexp(x)
        return np.ldexp(np.round(m * 2.0**bits) / 2.0**bits, e)

    p, c, worst = MANTISSA_BITS[fmt], float(np.float32(0.3)), 0.0
    for ref in references:
        x = rnd(np.asarray(ref, dtype=np.float64).ravel(), p)
        s = rnd(rnd(x + c, 24), p)
        t = rnd(rnd(s - c, 24), p)
        worst = max(worst, float(np.abs(rnd(rnd(t - x, 24), p)).max()))
    return 2 * worst


def softmax_prefix_rows(scores: list[float], block: int) -> list[tuple[int, float, float, float]]:
    """What the online softmax's state must be after each block, from the prefix itself (not the recursion):
    (block number, the block's max, the prefix's max, sum over the prefix of exp(s - prefix max)), math.fsum."""
    rows = []
    for k, j in enumerate(range(0, len(scores), block), start=1):
        prefix = scores[: j + block]
        top = max(prefix)
        rows.append((k, max(scores[j : j + block]), top, math.fsum(math.exp(s - top) for s in prefix)))
    return rows
