"""Block-scaled low-precision formats, emulated on the CPU: one scale per tensor, per 1x128 or 128x128 block
(DeepSeek-V3's FP8 recipe), per 32 elements with a power-of-two E8M0 scale (OCP MXFP8, MXFP4), per 16 elements
with an E4M3 scale under an fp32 tensor scale (NVIDIA's NVFP4).

Every quantizer returns the dequantized tensor (what the GEMM effectively multiplies) and how many values were
clamped at the format's max (overflow) or rounded to zero from a nonzero value (underflow). Casts to fp8 use torch's
float8 dtypes; FP4 E2M1 has no torch dtype here, so `round_e2m1` rounds to its 8 magnitudes by hand.

Scale rules, as the sources write them:
- per-tensor / 1x128 / 128x128 (TE Float8BlockScaling, DeepSeek-V3): s = amax / 448, fp32.
- MX, OCP rule (spec v1.0): shared exponent = floor(log2 amax) - emax_elem (8 for E4M3, 2 for E2M1); the block's
  largest value can land above the element max (up to 2x) and is clamped.
- MX, Transformer Engine's rule: the E8M0 scale amax/448 rounded *up* to a power of two: nothing clamps.
- NVFP4 (TE docs): s_global = amax_tensor / (448 * 6) in fp32; s_block = (amax_block / 6) / s_global cast to E4M3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from distlab.core.experiments import experiment
from distlab.core.results import Result

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # (2 - 2^-2) * 2^8, e4m3 "fn": the top exponent holds values
E4M3_EMAX = 8  # exponent of the largest normal power of two of e4m3
E2M1_BIAS = 1
E2M1_EMAX = 2  # 6 = 1.5 * 2^2


def e2m1_grid() -> torch.Tensor:
    """The 8 non-negative E2M1 values from the bit layout (2 exponent bits, bias 1, 1 mantissa bit, no inf/NaN):
    exponent 0 is subnormal, 0.m * 2^(1 - bias); otherwise 1.m * 2^(E - bias)."""
    vals = []
    for e in range(4):
        for m in range(2):
            vals.append((m / 2) * 2.0 ** (1 - E2M1_BIAS) if e == 0 else (1 + m / 2) * 2.0 ** (e - E2M1_BIAS))
    return torch.tensor(vals, dtype=torch.float64)


E2M1_GRID = e2m1_grid()  # 0, 0.5, 1, 1.5, 2, 3, 4, 6
E2M1_MAX = float(E2M1_GRID[-1])


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """x (already scaled) to the nearest E2M1 value, ties to the even code (mantissa bit 0), clamped at +-6."""
    mag = x.abs().double().clamp(max=E2M1_MAX).unsqueeze(-1)
    dist = (mag - E2M1_GRID).abs()  # (..., 8)
    ties = dist == dist.min(dim=-1, keepdim=True).values
    even = (torch.arange(8) % 2 == 0).double()  # codes 0, 2, 4, 6 have mantissa bit 0: values 0, 1, 2, 4
    pick = (ties.double() * (1 + even)).argmax(dim=-1)  # among the nearest, prefer the even code
    return (E2M1_GRID[pick] * x.sign().double()).to(x.dtype)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Saturating cast to fp8 e4m3 and back."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).to(x.dtype)


@dataclass(frozen=True)
class Quantized:
    """A dequantized tensor and what the cast lost."""

    values: torch.Tensor
    overflow: int
    """values whose scaled magnitude exceeded the element format's max (clamped)"""
    underflow: int
    """nonzero values that came back as zero"""


def _blocks(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """(R, C) -> (R/rows, C/cols, rows*cols): every block's elements on the last axis."""
    r, c = x.shape
    if r % rows or c % cols:
        raise ValueError(f"shape {tuple(x.shape)} is not a multiple of the {rows}x{cols} block")
    return x.reshape(r // rows, rows, c // cols, cols).permute(0, 2, 1, 3).reshape(r // rows, c // cols, rows * cols)


def _unblocks(b: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    nr, nc, _ = b.shape
    return b.reshape(nr, nc, rows, cols).permute(0, 2, 1, 3).reshape(nr * rows, nc * cols)


def _finish(x: torch.Tensor, scaled: torch.Tensor, q_scaled: torch.Tensor, scale, elem_max: float) -> Quantized:
    values = q_scaled * scale
    overflow = int((scaled.abs() > elem_max * (1 + 1e-12)).sum())  # amax / (amax / 448) may be 448 + 1 ulp
    underflow = int(((values == 0) & (x != 0)).sum())
    return Quantized(values, overflow, underflow)


def fp8_blocks(x: torch.Tensor, rows: int, cols: int) -> Quantized:
    """E4M3 with an fp32 scale amax/448 per rows x cols block (per tensor: the whole shape)."""
    b = _blocks(x.double(), rows, cols)
    amax = b.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))  # fp32 in practice; fp64 here so the
    # block's max lands exactly on 448 (an fp32-rounded scale can put it a hair above, a clamp that costs nothing)
    scaled = b / scale
    q = _finish(b, scaled, round_e4m3(scaled), scale, E4M3_MAX)
    return Quantized(_unblocks(q.values, rows, cols), q.overflow, q.underflow)


def e8m0_scale(amax: torch.Tensor, elem_max: float, elem_emax: int, *, rule: str) -> torch.Tensor:
    """A power-of-two block scale. rule="ocp": 2^(floor(log2 amax) - emax_elem) (OCP MX v1.0);
    rule="ceil": amax / elem_max rounded up to a power of two (Transformer Engine's MXFP8)."""
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    if rule == "ocp":
        exp = torch.floor(torch.log2(safe)) - elem_emax
    elif rule == "ceil":
        exp = torch.ceil(torch.log2(safe / elem_max))
    else:
        raise ValueError(f"unknown E8M0 rule {rule!r}")
    return torch.exp2(exp.clamp(-127, 127))


def mx(x: torch.Tensor, element: str, *, rule: str = "ocp", block: int = 32) -> Quantized:
    """MXFP8 (element="e4m3") or MXFP4 ("e2m1"): one E8M0 scale per `block` consecutive elements of a row."""
    elem_max, emax, rnd = {"e4m3": (E4M3_MAX, E4M3_EMAX, round_e4m3), "e2m1": (E2M1_MAX, E2M1_EMAX, round_e2m1)}[
        element
    ]
    b = _blocks(x.double(), 1, block)
    scale = e8m0_scale(b.abs().amax(dim=-1, keepdim=True), elem_max, emax, rule=rule)
    scaled = b / scale
    q = _finish(b, scaled, rnd(scaled.clamp(-elem_max, elem_max)), scale, elem_max)
    return Quantized(_unblocks(q.values, 1, block), q.overflow, q.underflow)


def nvfp4(x: torch.Tensor, block: int = 16) -> Quantized:
    """NVFP4: E2M1 elements, an E4M3 scale per `block` consecutive elements, an fp32 scale for the tensor."""
    b = _blocks(x.double(), 1, block)
    amax = float(b.abs().max())
    s_global = torch.tensor(amax / (E4M3_MAX * E2M1_MAX) if amax > 0 else 1.0).float().double()
    s_block = round_e4m3((b.abs().amax(dim=-1, keepdim=True) / E2M1_MAX) / s_global)
    scale = s_block * s_global
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    scaled = torch.where(scale > 0, b / safe, torch.zeros_like(b))
    q = _finish(b, scaled, round_e2m1(scaled), scale, E2M1_MAX)
    return Quantized(_unblocks(q.values, 1, block), q.overflow, q.underflow)


# name -> (quantizer, element bits, scale bits per element): a block of n elements with one s-bit scale costs
# n * e + s bits. Per tensor and NVFP4's tensor scale are one fp32 per tensor (~0 per element).
FORMATS = {
    "per-tensor e4m3": (lambda x: fp8_blocks(x, *x.shape), 8, 0.0),
    "1x128 e4m3": (lambda x: fp8_blocks(x, 1, 128), 8, 32 / 128),
    "128x128 e4m3": (lambda x: fp8_blocks(x, 128, 128), 8, 32 / 128**2),
    "MXFP8 (OCP rule)": (lambda x: mx(x, "e4m3", rule="ocp"), 8, 8 / 32),
    "MXFP8 (TE rule)": (lambda x: mx(x, "e4m3", rule="ceil"), 8, 8 / 32),
    "MXFP4": (lambda x: mx(x, "e2m1", rule="ocp"), 4, 8 / 32),
    "NVFP4": (nvfp4, 4, 8 / 16),
}


def errors(x: torch.Tensor, q: torch.Tensor) -> tuple[float, float]:
    """Relative error ||q - x|| / ||x|| and SNR in dB, in float64."""
    x, q = x.double(), q.double()
    rel = float((q - x).norm() / x.norm())
    return rel, (-20 * math.log10(rel) if rel > 0 else math.inf)


# ---------------------------------------------------------------- tensors like a trained model's
OUTLIER_CHANNELS = 4  # outlier channels in the synthetic activations
GRAD_SMALLEST = 1e-6  # the smallest per-token scale of the synthetic gradients


def outlier_activations(
    tokens: int, channels: int, *, seed: int, outliers: int = OUTLIER_CHANNELS, gain: float
) -> torch.Tensor:
    """Layer inputs as trained LLMs show them (Dettmers et al. 2022, LLM.int8()): roughly unit-scale values with a
    few channels, the same for every token, tens of times larger. Synthetic and seeded."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, channels, generator=g)
    idx = torch.randperm(channels, generator=g)[:outliers]
    x[:, idx] *= gain
    return x


def heavy_tailed_weights(rows: int, cols: int, *, seed: int, std: float = 0.02):
    """Weights with a Student-t (3 degrees of freedom) tail, scaled to `std`: most entries small, a few large."""
    g = torch.Generator().manual_seed(seed)
    chi2 = (torch.randn(3, rows, cols, generator=g) ** 2).sum(0)  # chi-squared, 3 degrees of freedom
    t = torch.randn(rows, cols, generator=g) / chi2.sqrt()  # Student t(3) / sqrt(3): the next line sets the scale
    return t * (std / t.std())


def spread_gradients(tokens: int, channels: int, *, seed: int, decades: float = 4.0, smallest: float = GRAD_SMALLEST):
    """Activation gradients whose per-token magnitude spans `decades` powers of ten up from `smallest` (tokens with
    large and tiny loss gradients in one tensor), far below 1 as unscaled gradients are."""
    g = torch.Generator().manual_seed(seed)
    rows = smallest * 10.0 ** (decades * torch.rand(tokens, 1, generator=g))
    return torch.randn(tokens, channels, generator=g) * rows


# ---------------------------------------------------------------- the formats against their specifications
HAND_BLOCK = [1000.0, 3.3, -0.07, 0.001] + [1.0] * 28
# Worked by hand (see the chapter's note). OCP: floor(log2 1000) = 9, scale 2^(9-8) = 2; 1000/2 = 500 > 448 clamps to
# 448 -> 896; 3.3/2 = 1.65 -> 1.625 (gap 1/8) -> 3.25; 0.07/2 = 0.035 -> 9 * 2^-8 -> 0.0703125; 0.001/2 = 0.0005 is
# under half the smallest subnormal 2^-9 -> 0; 1/2 exact. TE: scale 2^ceil(log2(1000/448)) = 4; 1000/4 = 250 -> 256
# (gap 16) -> 1024; 3.3/4 = 0.825 -> 0.8125 -> 3.25; 0.07/4 = 0.0175 -> 9 * 2^-9 -> 0.0703125; 0.001/4 -> 0.
HAND_OCP = [896.0, 3.25, -0.0703125, 0.0] + [1.0] * 28
HAND_TE = [1024.0, 3.25, -0.0703125, 0.0] + [1.0] * 28


def bits_per_element(element_bits: int, block: int, scale_bits: int) -> float:
    """Storage of a block of `block` elements with one scale, per element."""
    return (block * element_bits + scale_bits) / block


# ---------------------------------------------------------------- a second route, for the claims
# Each format rebuilt from torch and the sources alone: element grids enumerated from every fp8 byte (not torch's
# cast) or the E2M1 layout, nearest values found by a sorted search (not argmin over distances), block amaxes
# by a 4-D reduction (not `_blocks`), power-of-two scales by frexp's integer exponent (not log2).
@dataclass(frozen=True)
class Spec:
    grid: torch.Tensor
    """the element's non-negative values, code i at index i"""
    element_bits: int
    rows: int  # 0: the whole tensor
    cols: int
    rule: str  # "amax": amax / max; "ocp", "ceil": E8M0; "nvfp4": E4M3 times an fp32 tensor scale
    scale_bits: int


def reference_specs() -> dict[str, Spec]:
    """FORMATS' seven formats, every number from torch.finfo, the E2M1 layout or distlab/data/block_scaling.toml."""
    from distlab.core.facts import value

    e4m3 = e4m3_grid()
    e4m3_bits, e2m1_bits = torch.finfo(E4M3).bits, 1 + int(math.log2(len(E2M1_GRID)))  # sign + magnitude code
    fp32_bits, e8m0_bits = torch.finfo(torch.float32).bits, torch.finfo(torch.float8_e8m0fnu).bits
    weight_rows, weight_cols = (int(value(f"block_scaling.te-blockwise.block_{k}")) for k in ("rows", "cols"))
    tile, mx_block = int(value("block_scaling.te-blockwise.block")), int(value("block_scaling.te-mxfp8.block"))
    nv_block = int(value("block_scaling.te-nvfp4.block"))
    return {
        "per-tensor e4m3": Spec(e4m3, e4m3_bits, 0, 0, "amax", 0),
        "1x128 e4m3": Spec(e4m3, e4m3_bits, 1, tile, "amax", fp32_bits),
        "128x128 e4m3": Spec(e4m3, e4m3_bits, weight_rows, weight_cols, "amax", fp32_bits),
        "MXFP8 (OCP rule)": Spec(e4m3, e4m3_bits, 1, mx_block, "ocp", e8m0_bits),
        "MXFP8 (TE rule)": Spec(e4m3, e4m3_bits, 1, mx_block, "ceil", e8m0_bits),
        "MXFP4": Spec(E2M1_GRID, e2m1_bits, 1, mx_block, "ocp", e8m0_bits),  # MX: one block size for all elements
        "NVFP4": Spec(E2M1_GRID, e2m1_bits, 1, nv_block, "nvfp4", e4m3_bits),
    }


def e4m3_grid() -> torch.Tensor:
    """e4m3's 127 non-negative finite values: the bytes 0x00..0x7e read as e4m3 (0x7f is NaN)."""
    return torch.arange(127, dtype=torch.uint8).view(E4M3).double()


def spec_bits(spec: Spec) -> float:
    """Bits per element; a scale for the whole tensor costs ~0."""
    return (
        spec.element_bits
        if spec.rows == 0
        else bits_per_element(spec.element_bits, spec.rows * spec.cols, spec.scale_bits)
    )


def nearest_on_grid(mag: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """The grid value nearest to each magnitude (saturating at the top), ties to the even code."""
    mag = mag.clamp(max=float(grid[-1]))
    above = torch.searchsorted(grid, mag).clamp(max=len(grid) - 1)
    below = (above - 1).clamp(min=0)
    d_below, d_above = mag - grid[below], grid[above] - mag
    return grid[torch.where((d_below < d_above) | ((d_below == d_above) & (below % 2 == 0)), below, above)]


def reference_quantize(x: torch.Tensor, spec: Spec) -> Quantized:
    """`spec`'s format applied to x by the second route: what FORMATS' quantizer must give, value for value."""
    r, c = x.shape
    x = x.double()
    rows, cols = (r, c) if spec.rows == 0 else (spec.rows, spec.cols)
    amax = x.abs().reshape(r // rows, rows, c // cols, cols).amax(dim=(1, 3))
    amax = amax.repeat_interleave(rows, 0).repeat_interleave(cols, 1)
    top = float(spec.grid[-1])
    if spec.rule == "amax":
        scale = torch.where(amax > 0, amax / top, 1.0)
    elif spec.rule in ("ocp", "ceil"):
        # OCP: 2^(e(amax) - e(top)), e = frexp's exponent; TE: the least 2^k with amax / 2^k <= top
        mant, exp = torch.frexp(amax if spec.rule == "ocp" else amax / top)
        exp = exp - torch.frexp(torch.tensor(top))[1] if spec.rule == "ocp" else exp - (mant == 0.5).int()
        scale = torch.where(amax > 0, torch.ldexp(torch.ones_like(amax), exp), 1.0)
    else:  # nvfp4, TE's formulas
        e4m3 = e4m3_grid()
        s_global = float(torch.tensor(float(x.abs().max()) / (float(e4m3[-1]) * top), dtype=torch.float32))
        scale = nearest_on_grid(amax / top / s_global, e4m3) * s_global
    scaled = torch.where(scale > 0, x / scale, 0.0)
    values = nearest_on_grid(scaled.abs(), spec.grid) * scaled.sign() * scale
    clamped = (scale > 0) & (x.abs() > top * scale)
    overflow = 0 if spec.rule == "amax" else int(clamped.sum())  # amax / max puts the block's max on the top value
    return Quantized(values, overflow, int(((values == 0) & (x != 0)).sum()))


def reference_tensor(seed: int = 0) -> torch.Tensor:
    """A test tensor for every format's path: rows 10^-3..10, 4 outlier columns x50 (OCP's clamp, underflow), an
    all-zero block (the zero-amax branches)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 256, generator=g) * 10.0 ** (4 * torch.rand(256, 1, generator=g) - 3)
    x[:, :4] *= 50
    x[0, :128] = 0
    return x


def t3_cdf(t: torch.Tensor) -> torch.Tensor:
    """Student t(3)'s CDF in closed form: 1/2 + (u / (1 + u^2) + atan u) / pi, u = t / sqrt 3."""
    u = t / math.sqrt(3)
    return 0.5 + (u / (1 + u * u) + torch.atan(u)) / math.pi


def ks_to_t3(w: torch.Tensor) -> float:
    """Kolmogorov-Smirnov distance from w, rescaled so its median |w| is t(3)'s, to t(3)'s CDF."""
    lo, hi = 0.0, 2.0  # median |t| of t(3): F(q) = 3/4, by bisection
    for _ in range(60):
        lo, hi = ((lo + hi) / 2, hi) if float(t3_cdf(torch.tensor((lo + hi) / 2))) < 0.75 else (lo, (lo + hi) / 2)
    s, _ = (w.double().flatten() * (lo / w.double().abs().median())).sort()
    cdf, i = t3_cdf(s), torch.arange(1, s.numel() + 1, dtype=torch.float64)
    return float(torch.maximum(i / s.numel() - cdf, cdf - (i - 1) / s.numel()).max())


@experiment(
    "block-formats",
    "FP4 E2M1, E4M3 and E8M0 from their bit layouts against the sources; MX's two scale rules on a hand-worked block",
    kind="computed",
)
def block_formats(device: str) -> Result:
    from distlab.core.facts import value

    r = Result("block-formats")
    grid = E2M1_GRID.tolist()
    r.table(
        "e2m1",
        ["code (magnitude bits)", "value"],
        [[f"{i:03b}", v] for i, v in enumerate(grid)],
        caption="FP4 E2M1's eight magnitudes from its bit layout (2 exponent bits, bias 1, 1 mantissa bit)",
    )
    r.add("e2m1_max", grid[-1], "", "largest E2M1 magnitude")
    r.add("e2m1_min_subnormal", grid[1], "", "smallest nonzero E2M1 magnitude")
    r.add("e4m3_max", torch.finfo(E4M3).max, "", "largest e4m3 value (torch.finfo)")
    r.claim("E2M1 max from the layout = the source's", grid[-1], value("block_scaling.e2m1.e2m1_max"))
    r.claim("E2M1 max = Transformer Engine's fp4_max", grid[-1], value("block_scaling.te-nvfp4.e2m1_max"))
    r.claim("E2M1 smallest subnormal from the layout", grid[1], value("block_scaling.e2m1.e2m1_min_subnormal"))
    r.claim("E2M1 smallest normal from the layout", grid[2], value("block_scaling.e2m1.e2m1_min_normal"))
    r.claim(
        "e4m3 max (torch) = Transformer Engine's max_fp8",
        torch.finfo(E4M3).max,
        value("block_scaling.te-mxfp8.e4m3_max"),
    )

    # E8M0: both scale rules give exact powers of two over fp32's whole exponent range
    g = torch.Generator().manual_seed(0)
    amax = torch.exp2(torch.empty(4096, dtype=torch.float64).uniform_(-100, 100, generator=g))
    ocp_low, ocp_high = 2.0**E4M3_EMAX, 2.0 ** (E4M3_EMAX + 1)  # where the OCP rule puts a block's max
    for rule, lo, hi in (("ocp", ocp_low, ocp_high), ("ceil", E4M3_MAX / 2, E4M3_MAX)):
        s = e8m0_scale(amax, E4M3_MAX, E4M3_EMAX, rule=rule)
        mant, _ = torch.frexp(s)
        r.claim(f"E8M0 scales ({rule} rule) are powers of two", int((mant != 0.5).sum()), 0, unit="scales")
        ratio = amax / s
        r.claim(f"{rule} rule: amax / scale >= {lo:g}", float(ratio.min()), lo, relation=">=")
        r.claim(
            f"{rule} rule: amax / scale < {hi:g}" if rule == "ocp" else f"{rule} rule: amax / scale <= {hi:g}",
            float(ratio.max()),
            hi,
            relation="<=",
        )
    r.add("e8m0_bias", value("block_scaling.te-mxfp8.e8m0_bias"), "", "E8M0 exponent bias (= fp32's)")
    top_power = math.floor(math.log2(torch.finfo(E4M3).max))  # e4m3's largest power of two, from torch
    r.claim("OCP landing range's low end = 2^floor(log2 e4m3 max)", ocp_low, 2.0**top_power)
    r.claim("... its high end = 2^(that + 1)", ocp_high, 2.0 ** (top_power + 1))
    r.add("ocp_block_max_low", ocp_low, "", "OCP rule: the smallest a block's max lands at after scaling")
    r.add("ocp_block_max_high", ocp_high, "", "OCP rule: the bound it stays below")

    block = torch.tensor([HAND_BLOCK], dtype=torch.float64)
    ocp, te = mx(block, "e4m3", rule="ocp"), mx(block, "e4m3", rule="ceil")
    r.table(
        "hand_block",
        ["value", "OCP rule (scale 2)", "TE rule (scale 4)"],
        [[x, a, b] for x, a, b in zip(HAND_BLOCK[:5], ocp.values[0, :5].tolist(), te.values[0, :5].tolist())],
        caption="One MXFP8 block (the first 5 of its 32 values; the other 27 are 1.0), quantized by each scale rule",
    )
    for rule, got, hand in (("OCP", ocp, HAND_OCP), ("TE", te, HAND_TE)):
        worst = float((got.values[0] - torch.tensor(hand, dtype=torch.float64)).abs().max())
        r.claim(f"hand-worked block, {rule} rule: largest difference from the hand's 32 values", worst, 0.0)
    r.claim("OCP rule clamps the block's max (1000 -> 896)", ocp.overflow, 1, unit="values")
    r.claim("TE rule clamps nothing", te.overflow, 0, unit="values")
    r.add("hand_ocp_max", ocp.values[0, 0].item(), "", "1000 through MXFP8, OCP rule")
    r.add("hand_te_max", te.values[0, 0].item(), "", "1000 through MXFP8, TE rule")

    # Round-to-nearest: at most half a gap, i.e. 2^-(m+1) of the value, for values in the normal range
    x = torch.randn(64, 1024, generator=g, dtype=torch.float64) * 10
    for name, rnd, m, lo in (("e4m3", round_e4m3, 3, 2.0**-6), ("E2M1", round_e2m1, 1, 1.0)):
        top = E4M3_MAX if name == "e4m3" else E2M1_MAX
        y = x * (top / x.abs().max())
        normal = y.abs() >= lo
        worst = float(((rnd(y) - y).abs() / y.abs())[normal].max())
        half_ulp = 2.0 ** -(m + 1)
        r.claim(f"{name}: worst relative rounding error <= half an ulp, 2^-{m + 1}", worst, half_ulp, relation="<=")
        # the bound is not slack: a value half a gap above a binade's start errs by h / (1 + h) of itself
        r.claim(f"{name}: worst error = h / (1 + h), h that half ulp", worst, half_ulp / (1 + half_ulp), rel_tol=0.01)
        r.add(f"{name.lower()}_half_ulp", half_ulp, "", f"{name}: half an ulp relative to the value")

    specs = reference_specs()
    shown = {
        "1x128 e4m3 (fp32 scale)": "1x128 e4m3",
        "MXFP8 (E8M0 scale)": "MXFP8 (OCP rule)",
        "MXFP4 (E8M0 scale)": "MXFP4",
        "NVFP4 (E4M3 scale)": "NVFP4",
    }
    rows = []
    for label, name in shown.items():
        sp = specs[name]
        rows.append([label, sp.element_bits, sp.rows * sp.cols, sp.scale_bits, spec_bits(sp)])
    r.table(
        "bits",
        ["format", "element bits", "block", "scale bits", "bits per element"],
        rows,
        caption="Storage per element, the block's scale included (a tensor-wide fp32 scale adds ~0)",
    )
    r.claim("MXFP8: 8.25 bits per element (worked by hand: 8 + 8/32)", rows[1][4], 8.25)
    r.claim("NVFP4: 4.5 bits per element (worked by hand: 4 + 8/16)", rows[3][4], 4.5)
    r.add("mxfp8_bits", rows[1][4], "bits", "MXFP8 bits per element")
    r.add("nvfp4_bits", rows[3][4], "bits", "NVFP4 bits per element")
    r.add("mxfp4_bits", rows[2][4], "bits", "MXFP4 bits per element")
    r.claim(
        "bits/element of FORMATS = torch.finfo's and the sources'",
        max(abs(e + s - spec_bits(specs[name])) for name, (_, e, s) in FORMATS.items()),
        0.0,
    )

    # Every quantizer against the second route above, on a tensor that takes every branch
    x = reference_tensor()
    pairs = [(quantize(x), reference_quantize(x, specs[name])) for name, (quantize, _, _) in FORMATS.items()]
    r.claim(
        f"{len(pairs)} formats = a second route (grid search, frexp)",
        max(float((q.values - ref.values).abs().max()) for q, ref in pairs),
        0.0,
    )
    r.claim(
        "... their clamp and flush counts too",
        sum(abs(q.overflow - ref.overflow) + abs(q.underflow - ref.underflow) for q, ref in pairs),
        0,
        unit="values",
    )
    q = pairs[-1][0].values
    power_ratio = float((x.double() ** 2).sum() / ((q - x.double()) ** 2).sum())
    r.claim("SNR = 10 log10 of signal over error power", errors(x, q)[1], 10 * math.log10(power_ratio), rel_tol=1e-12)

    # The synthetic tensors are what their docstrings say
    std, decades = 0.02, 4.0
    w = heavy_tailed_weights(512, 512, seed=0, std=std)
    r.claim(
        "weights: Kolmogorov distance to t(3) <= 1.63/sqrt(n) (1 % level)",
        ks_to_t3(w),
        1.63 / math.sqrt(w.numel()),
        relation="<=",
    )
    r.claim("weights: std = the one asked for", float(w.double().std()), std, rel_tol=1e-6)
    log_rms = spread_gradients(1024, 1024, seed=0, decades=decades).double().pow(2).mean(1).sqrt().log10()
    smallest = math.log10(GRAD_SMALLEST)
    r.claim(
        f"gradients: token rms spans 10^{smallest:g}..10^{smallest + decades:g} (decades off)",
        max(abs(float(log_rms.min()) - smallest), abs(float(log_rms.max()) - smallest - decades)),
        0.0,
        abs_tol=0.05,
    )
    r.add("outlier_channels", OUTLIER_CHANNELS, "", "outlier channels of the synthetic activations")
    r.add("grad_smallest", GRAD_SMALLEST, "", "smallest per-token scale of the synthetic gradients")
    return r
