"""What FlashAttention-4 changes for Blackwell, computed: the exponential becomes the wall (the tensor cores got
2.25x faster, the special-function units did not), so FA4 (1) computes part of its exp2 in software, a cubic
polynomial on the FMA units after splitting off the integer part into the exponent bits, and (2) rescales the
online softmax only when the running max grows by more than a threshold, which is exact: the stale max cancels
in the final division.

Both tricks are run here in float64 against the exact softmax; the balance of exp against matmul comes from the
published per-clock figures and, independently, from the chips' totals (gpus.toml, FlashAttention-3's exp rate).
"""

from __future__ import annotations

import math

import torch

from distlab.attention import flash_attention_checks as checks
from distlab.core.experiments import experiment
from distlab.core.facts import value
from distlab.core.results import Result
from distlab.runtime.threads import single_threaded

LOG2E = 1.4426950408889634  # 1 / ln 2: exp(x) = exp2(x log2 e)


def fit_exp2_poly(degree: int) -> torch.Tensor:
    """Least-squares coefficients c_0..c_degree of 2^f on [0, 1), with c_0 pinned to 1 so 2^0 is exact."""
    f = torch.linspace(0, 1, 4097, dtype=torch.float64)
    powers = torch.stack([f**k for k in range(1, degree + 1)], dim=1)  # (n, degree)
    rest = torch.linalg.lstsq(powers, (torch.exp2(f) - 1)[:, None]).solution[:, 0]
    # LAPACK's last bits depend on the memory's alignment, which differs between a build and a fresh run: rounded to
    # 1e-13 (errors judged are ~1e-4), the coefficients, and every number computed from them, are reproducible.
    rest = torch.round(rest, decimals=13)
    return torch.cat([torch.ones(1, dtype=torch.float64), rest])


def exp2_emulated(x: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """2^x = 2^floor(x) * p(x - floor(x)): the integer part goes into the exponent (ldexp, a shift and an integer
    add on a GPU), the fraction through the polynomial by Horner's rule (FMAs)."""
    whole = torch.floor(x)
    frac = x - whole
    p = torch.zeros_like(x)
    for c in coeffs.flip(0):
        p = p * frac + c
    return torch.ldexp(p, whole.to(torch.int32))


def online_softmax(scores: torch.Tensor, v: torch.Tensor, block: int, threshold: float, exp2=torch.exp2):
    """softmax(scores) @ v one key block at a time, in the log2 domain. The running max m is raised (and the
    accumulators rescaled by 2^(m_old - m_new)) only when a block's max exceeds it by more than `threshold`;
    otherwise the stale m stays and the block's exponentials may reach 2^threshold. Returns (out, rescales)."""
    rows, n = scores.shape
    s2 = scores * LOG2E
    m = torch.full((rows,), -math.inf, dtype=scores.dtype)
    acc = torch.zeros(rows, v.shape[1], dtype=scores.dtype)
    denom = torch.zeros(rows, dtype=scores.dtype)
    rescales = 0
    for j in range(0, n, block):
        blk = s2[:, j : j + block]
        m_blk = blk.max(dim=1).values
        grow = m_blk > m + threshold  # the first block always grows (m = -inf)
        m_new = torch.where(grow, m_blk, m)
        scale = torch.where(grow, exp2(torch.where(grow & torch.isfinite(m), m - m_new, 0.0)), 1.0)
        scale = torch.where(torch.isfinite(m), scale, torch.zeros_like(scale))
        rescales += int((grow & torch.isfinite(m)).sum())
        p = exp2(blk - m_new[:, None])
        acc = acc * scale[:, None] + p @ v[j : j + block]
        denom = denom * scale + p.sum(dim=1)
        m = m_new
    return acc / denom[:, None], rescales


@experiment(
    "flash-attention-4",
    "FlashAttention-4's Blackwell tricks computed: exp vs matmul balance on B200, a cubic software exp2 against "
    "bf16's precision, conditional online-softmax rescaling (exact, fewer rescales), in float64",
    kind="computed",
)
@single_threaded
def flash_attention4(device: str) -> Result:
    r = Result("flash-attention-4")
    # 1. The balance: one exponential per score against 4d matmul FLOPs per score (QK^T and PV, forward)
    mma, exps = value("flash_attention4.FA4.mma_flops_per_clock_sm"), value("flash_attention4.FA4.exp_per_clock_sm")
    for d in (64, 128):
        r.add(f"b200_exp_over_mma_d{d}", mma / (exps * 4 * d), "", f"B200: exp time / matmul time, d = {d}")
    h100 = value("gpus.H100-SXM.bf16_dense_tflops") / value("flash_attention.FA3.h100_exp_tflops") / (4 * 128)
    growth = value("gpus.B200.bf16_dense_tflops") / value("gpus.H100-SXM.bf16_dense_tflops")
    r.add("h100_exp_over_mma_d128", h100, "", "H100: exp time / matmul time, d = 128 (FA3's exp rate)")
    r.add("tensor_core_growth", growth, "x", "B200 / H100 dense bf16 (datasheets)")
    published = value("flash_attention4.FA4.b200_bf16_pflops") / value("flash_attention4.FA4.h100_bf16_pflops")
    r.claim("datasheets' B200/H100 bf16 = the FA4 authors' 1 -> 2.25 PFLOPs", growth, published, rel_tol=0.02)
    r.claim(
        "B200 exp/matmul at d = 128: per-clock figures vs H100's ratio x tensor-core growth (SFUs unchanged per SM)",
        mma / (exps * 4 * 128),
        h100 * growth * value("gpus.H100-SXM.sms") / value("gpus.B200.sms"),
        rel_tol=0.05,
        formula="(989 / 3.9 / 512) x (2250 / 989) x (132 / 148 SMs)",
    )
    tile = value("flash_attention4.FA4.tile")
    mma_cycles, exp_cycles = (
        value("flash_attention4.FA4.tile_mma_cycles"),
        value("flash_attention4.FA4.tile_exp_cycles"),
    )
    r.claim(
        "the post's 1024 tensor-core cycles per 128^3 tile = 2 x 128^3 x 2 / 8192 FLOP per clock",
        mma_cycles,
        2 * 2 * tile**3 / mma,
    )
    r.claim("the post's 1024 exp cycles per 128 x 128 tile = 128^2 / 16 per clock", exp_cycles, tile * tile / exps)
    for d in (64, 128):
        r.claim(
            f"B200 exp/matmul at d = {d} = the post's cycles per tile (matmul cycles scale with d)",
            r.quantities[f"b200_exp_over_mma_d{d}"].value,
            exp_cycles / (mma_cycles * d / tile),
            rel_tol=1e-9,
        )
    r.claim("H100 exp/matmul at d = 128, by hand", h100, checks.exp_share(128, "bf16"), rel_tol=1e-9)
    r.claim(
        "on B200 the exponentials take as long as the matmuls at d = 128 (ratio >= 0.9)",
        mma / (exps * 4 * 128),
        0.9,
        relation=">=",
    )

    # 2. Software exp2: a cubic on [0, 1) after range reduction, against exp2 in float64 and bf16's rounding
    degree = int(value("flash_attention4.FA4.poly_degree"))
    coeffs = fit_exp2_poly(degree)
    x = torch.linspace(-30, 0, 200_001, dtype=torch.float64)  # scores minus the running max: <= 0
    rel = ((exp2_emulated(x, coeffs) - torch.exp2(x)).abs() / torch.exp2(x)).max().item()
    bf16_half_ulp = 2.0**-9
    r.claim(
        f"degree-{degree} exp2's worst relative error, re-evaluated in plain Python on the same points",
        rel,
        checks.exp2_poly_rel_error(coeffs.tolist(), x.tolist()),
        rel_tol=1e-6,
        formula="|p(f) - 2^f| / 2^f at f = x - floor(x); the power of two is exact",
    )
    r.add("poly_max_rel_error", rel, "", f"degree-{degree} software exp2: worst relative error on [-30, 0]")
    r.add("bf16_half_ulp", bf16_half_ulp, "", "bf16's relative rounding error bound")
    r.claim(
        f"degree-{degree} exp2 within bf16's half ulp (P is rounded to bf16 before the PV matmul anyway)",
        rel,
        bf16_half_ulp,
        relation="<=",
    )
    r.claim(
        f"degree-{degree - 1} would not be (the cubic is needed)",
        ((exp2_emulated(x, fit_exp2_poly(degree - 1)) - torch.exp2(x)).abs() / torch.exp2(x)).max().item(),
        bf16_half_ulp,
        relation=">=",
    )

    # 3. Attention with both tricks, in float64, against the exact softmax
    g = torch.Generator().manual_seed(0)
    rows, n, d, block = 256, 1024, 64, 64
    q, k = torch.randn(rows, d, generator=g, dtype=torch.float64), torch.randn(n, d, generator=g, dtype=torch.float64)
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    scores = q @ k.T / math.sqrt(d)
    exact = torch.softmax(scores, dim=1) @ v
    threshold = 8.0  # log2 units: skip rescaling unless the max grows by 2^8 (fp32 accumulators have the headroom)
    every, n_every = online_softmax(scores, v, block, 0.0)
    cond, n_cond = online_softmax(scores, v, block, threshold)
    soft, _ = online_softmax(scores, v, block, threshold, exp2=lambda t: exp2_emulated(t, coeffs))
    p_bf16 = torch.softmax(scores, dim=1).bfloat16().double() @ v  # P rounded to bf16, as the PV matmul reads it
    err = {
        k_: float((o - exact).abs().max())
        for k_, o in {"every": every, "cond": cond, "soft": soft, "bf16": p_bf16}.items()
    }
    r.claim("online softmax, rescaling on every max increase = exact", err["every"], 0.0, abs_tol=1e-12)
    r.claim(
        f"conditional rescaling (threshold 2^{threshold:g}) = exact: the stale max cancels",
        err["cond"],
        0.0,
        abs_tol=1e-12,
    )
    r.claim("conditional rescaling skips at least half of the rescales", n_cond, n_every / 2, relation="<=")
    r.claim(
        "software exp2 + conditional rescaling: error below that of rounding P to bf16",
        err["soft"],
        err["bf16"],
        relation="<=",
    )
    r.table(
        "tricks",
        ["online softmax", "rescales", "max abs error vs exact softmax"],
        [
            ["rescale whenever the max grows", n_every, err["every"]],
            [f"rescale when it grows by more than 2^{threshold:g}", n_cond, err["cond"]],
            [f"the same with the degree-{degree} software exp2", n_cond, err["soft"]],
            ["(for scale: exact softmax with P rounded to bf16)", "", err["bf16"]],
        ],
        caption=f"{rows} query rows over {n} keys in blocks of {block}, d = {d}, float64; rescales counted per row "
        "and block after the first",
    )
    listed = scores.tolist()
    r.claim("rescales on every increase, counted in plain Python", n_every, checks.online_rescales(listed, block, 0.0))
    r.claim("conditional rescales, counted in plain Python", n_cond, checks.online_rescales(listed, block, threshold))
    r.claim(
        "bf16's half ulp, relative, at the top of a binade (its smallest) = torch.finfo(bfloat16).eps / 4",
        bf16_half_ulp,
        torch.finfo(torch.bfloat16).eps / 4,
    )
    r.add("rescales_every", n_every, "", "rescales, on every increase")
    r.add("rescales_conditional", n_cond, "", "rescales, conditional")
    r.add("rescale_threshold", threshold, "", "threshold, log2 units")
    return r
