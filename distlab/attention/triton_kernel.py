"""A FlashAttention kernel in Triton, forward and backward, wrapped in an autograd Function.

The loop order is FlashAttention-2's (Dao 2023, Algorithm 1 and 2): one program per block of BLOCK_M
queries and per (batch, head), so the grid parallelises over the sequence too; the forward keeps the
unnormalised accumulator on chip and divides by the running sum once at the end; the backward runs
two kernels, one per block of keys (accumulating dK, dV over queries) and one per block of queries
(accumulating dQ over keys), so neither needs atomics. Scores use base 2: exp(x) = exp2(x * log2 e),
with the softmax scale folded into one multiply.

Any N works (masked loads and stores on the ragged last block); head dims 16, 32, 64 and 128; fp32,
bf16 and fp16 inputs with fp32 accumulation. fp32 dots use input_precision="ieee" (a GPU's default
tf32 would be ~1e-3 off); 16-bit dots run on tensor cores. On a machine without a CUDA device the
package sets TRITON_INTERPRET=1 before triton is imported (distlab/__init__.py, the one place that rule lives), so
the same kernels run (slowly) on CPU tensors.
"""

from __future__ import annotations

import math
import os

import torch
import triton  # TRITON_INTERPRET is decided by distlab/__init__.py, imported before this module
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# 1 / ln 2: scores in base 2, exp(x) = exp2(x * LOG2E). A constexpr global, the kind a @triton.jit kernel may
# read. (No ln 2 is needed anywhere: L is kept in base 2, so the backward recomputes P with no conversion.)
LOG2E = tl.constexpr(1.4426950408889634)
# Blocks for the interpreter and for explicit configs: (BLOCK_M, BLOCK_N, num_warps, num_stages).
DEFAULT_FWD = (64, 64, 4, 2)
DEFAULT_BWD = (64, 64, 4, 2)


# ---------------------------------------------------------------- helpers
@triton.jit
def _dot(a, b, PRECISION: tl.constexpr):
    """tl.dot with fp32 accumulation. "upcast": Triton 3.9's interpreter multiplies bf16 bit patterns as
    integers, so there bf16 operands go in as fp32 (a product of two bf16 numbers is exact in fp32)."""
    if PRECISION == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _cast(x, dtype: tl.constexpr, PRECISION: tl.constexpr):
    """x.to(dtype), rounding to nearest even. Triton 3.9's interpreter truncates fp32 -> bf16 where a GPU
    rounds, so under "upcast" the fp32 bits are rounded first and the cast that follows is exact."""
    if PRECISION == "upcast":
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _tile(base, b, h, rows, cols, sb, sh, sn, sd):
    """Pointers to a (len(rows), len(cols)) tile of head (b, h) of a (B, H, N, D) tensor with any strides."""
    return base + b * sb + h * sh + rows[:, None] * sn + cols[None, :] * sd


@triton.jit
def _head(H):
    """This program's (batch x heads index, batch, head); b and h in int64 for large tensors' offsets."""
    bh = tl.program_id(1)
    return bh, (bh // H).to(tl.int64), (bh % H).to(tl.int64)


@triton.jit
def _row_stats(LSE, DELTA, bh, N, offs_m):
    """L2 (base-2 log-sum-exp) and delta = rowsum(dO * O) of the queries offs_m; 0 past N."""
    lse2 = tl.load(LSE + bh * N + offs_m, mask=offs_m < N, other=0.0)
    return lse2, tl.load(DELTA + bh * N + offs_m, mask=offs_m < N, other=0.0)


# ---------------------------------------------------------------- forward
@triton.jit
def _fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    skn,
    skd,
    svn,
    svd,
    lo,
    hi,
    N,
    qk_scale,
    offs_m,
    offs_d,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Online softmax over key blocks [lo, hi): MASKED=False for full blocks left of the diagonal."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + offs_n[:, None] * skn + offs_d[None, :] * skd  # (BLOCK_N, D)
        v_ptrs = v_base + offs_n[:, None] * svn + offs_d[None, :] * svd  # (BLOCK_N, D)
        if MASKED:
            k = tl.load(k_ptrs, mask=offs_n[:, None] < N, other=0.0)
            v = tl.load(v_ptrs, mask=offs_n[:, None] < N, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        qk = _dot(q, tl.trans(k), PRECISION)  # (BLOCK_M, BLOCK_N), unscaled
        if MASKED:
            keep = offs_n[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)  # running max, base-2 units
        p = tl.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)  # rescales what was accumulated under the old max
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(_cast(p, v.dtype, PRECISION), v, PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    Out,
    LSE,
    sm_scale,
    sqb,
    sqh,
    sqn,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sob,
    soh,
    son,
    sod,
    H,
    N,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0)
    bh, b, h = _head(H)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < N
    q = tl.load(_tile(Q, b, h, offs_m, offs_d, sqb, sqh, sqn, sqd), mask=rows, other=0.0)  # stays on chip
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E  # scores in base 2
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    if CAUSAL:  # keys up to the diagonal; blocks left of this query block need no mask
        hi = tl.minimum(N, (start_m + 1) * BLOCK_M)
        full_end = start_m * BLOCK_M  # a multiple of BLOCK_N (BLOCK_M % BLOCK_N == 0)
    else:  # every key; only the ragged last block needs a mask
        hi = N
        full_end = (N // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        skn,
        skd,
        svn,
        svd,
        0,
        full_end,
        N,
        qk_scale,
        offs_m,
        offs_d,
        BLOCK_N,
        False,
        CAUSAL,
        PRECISION,
    )
    acc, l_i, m_i = _fwd_inner(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        skn,
        skd,
        svn,
        svd,
        full_end,
        hi,
        N,
        qk_scale,
        offs_m,
        offs_d,
        BLOCK_N,
        True,
        CAUSAL,
        PRECISION,
    )
    o = acc / l_i[:, None]  # normalise once, at the end (FlashAttention-2)
    tl.store(_tile(Out, b, h, offs_m, offs_d, sob, soh, son, sod), _cast(o, Out.dtype.element_ty, PRECISION), mask=rows)
    tl.store(LSE + bh * N + offs_m, m_i + tl.log2(l_i), mask=offs_m < N)  # L2 = m + log2 l, base 2


# ---------------------------------------------------------------- backward
@triton.jit
def _bwd_delta_kernel(
    Out, DO, DELTA, sob, soh, son, sod, sdb, sdh, sdn, sdd, H, N, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr
):
    """delta_i = rowsum(dO_i * O_i) (= rowsum(P_i * dP_i)), one fp32 per query."""
    bh, b, h = _head(H)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < N
    o = tl.load(_tile(Out, b, h, offs_m, offs_d, sob, soh, son, sod), mask=rows, other=0.0)
    do = tl.load(_tile(DO, b, h, offs_m, offs_d, sdb, sdh, sdn, sdd), mask=rows, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh * N + offs_m, delta, mask=offs_m < N)


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    LSE,
    DELTA,
    sm_scale,
    sqb,
    sqh,
    sqn,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sdb,
    sdh,
    sdn,
    sdd,
    s1b,
    s1h,
    s1n,
    s1d,
    s2b,
    s2h,
    s2n,
    s2d,
    H,
    N,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One block of keys: dV = sum_i P_i^T dO_i and dK = scale sum_i dS_i^T Q_i over query blocks i.
    s1* are dK's strides, s2* dV's."""
    bh, b, h = _head(H)
    start_n = tl.program_id(0) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    cols = offs_n[:, None] < N
    k = tl.load(_tile(K, b, h, offs_n, offs_d, skb, skh, skn, skd), mask=cols, other=0.0)  # (BLOCK_N, D)
    v = tl.load(_tile(V, b, h, offs_n, offs_d, svb, svh, svn, svd), mask=cols, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0  # causal: earlier queries see none of these keys
    for start_m in range(lo, N, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = offs_m[:, None] < N
        q = tl.load(_tile(Q, b, h, offs_m, offs_d, sqb, sqh, sqn, sqd), mask=rows, other=0.0)
        do = tl.load(_tile(DO, b, h, offs_m, offs_d, sdb, sdh, sdn, sdd), mask=rows, other=0.0)
        lse2, delta = _row_stats(LSE, DELTA, bh, N, offs_m)
        qkT = _dot(k, tl.trans(q), PRECISION)  # (BLOCK_N, BLOCK_M) = S^T, unscaled
        keep = (offs_m[None, :] < N) & (offs_n[:, None] < N)
        if CAUSAL:
            keep = keep & (offs_m[None, :] >= offs_n[:, None])
        pT = tl.where(keep, tl.exp2(qkT * qk_scale - lse2[None, :]), 0.0)  # P^T, recomputed from L
        dv += _dot(_cast(pT, do.dtype, PRECISION), do, PRECISION)
        dpT = _dot(v, tl.trans(do), PRECISION)  # (dO V^T)^T
        dsT = pT * (dpT - delta[None, :])
        dk += _dot(_cast(dsT, q.dtype, PRECISION), q, PRECISION)
    dk = _cast(dk * sm_scale, DK.dtype.element_ty, PRECISION)
    tl.store(_tile(DK, b, h, offs_n, offs_d, s1b, s1h, s1n, s1d), dk, mask=cols)
    tl.store(_tile(DV, b, h, offs_n, offs_d, s2b, s2h, s2n, s2d), _cast(dv, DV.dtype.element_ty, PRECISION), mask=cols)


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    LSE,
    DELTA,
    sm_scale,
    sqb,
    sqh,
    sqn,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sdb,
    sdh,
    sdn,
    sdd,
    s1b,
    s1h,
    s1n,
    s1d,
    H,
    N,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One block of queries: dQ = scale sum_j dS_j K_j over key blocks j. s1* are dQ's strides."""
    bh, b, h = _head(H)
    start_m = tl.program_id(0) * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m[:, None] < N
    q = tl.load(_tile(Q, b, h, offs_m, offs_d, sqb, sqh, sqn, sqd), mask=rows, other=0.0)
    do = tl.load(_tile(DO, b, h, offs_m, offs_d, sdb, sdh, sdn, sdd), mask=rows, other=0.0)
    lse2, delta = _row_stats(LSE, DELTA, bh, N, offs_m)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    hi = tl.minimum(N, start_m + BLOCK_M) if CAUSAL else N
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols = offs_n[:, None] < N
        k = tl.load(_tile(K, b, h, offs_n, offs_d, skb, skh, skn, skd), mask=cols, other=0.0)
        v = tl.load(_tile(V, b, h, offs_n, offs_d, svb, svh, svn, svd), mask=cols, other=0.0)
        qk = _dot(q, tl.trans(k), PRECISION)  # (BLOCK_M, BLOCK_N)
        keep = offs_n[None, :] < N
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(keep, tl.exp2(qk * qk_scale - lse2[:, None]), 0.0)
        dp = _dot(do, tl.trans(v), PRECISION)
        ds = p * (dp - delta[:, None])
        dq += _dot(_cast(ds, k.dtype, PRECISION), k, PRECISION)
    dq = _cast(dq * sm_scale, DQ.dtype.element_ty, PRECISION)
    tl.store(_tile(DQ, b, h, offs_m, offs_d, s1b, s1h, s1n, s1d), dq, mask=rows)


# ---------------------------------------------------------------- autotuned versions (compiled GPUs only)
def _configs(pairs):
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in pairs]


_KEY = ["N", "HEAD_DIM", "CAUSAL"]  # the autotuner adds the tensors' dtypes to the key
# A few configs each (compile time counts in the benchmark's 5 minutes), (BLOCK_M, BLOCK_N, warps, stages).
# fp32 tiles take twice the shared memory of 16-bit ones, so fp32 gets small tiles of its own; the forward
# needs BLOCK_M % BLOCK_N == 0 (the causal split). The 16-bit configs are ones that compile without register
# spills for sm_80, sm_90 and sm_100 at d = 128 (flash-attention-compile checks it; chapter 8 has the table).
_HALF = {
    "fwd": [(128, 64, 8, 4), (128, 32, 8, 3), (64, 64, 4, 3)],
    "dkdv": [(64, 64, 8, 3), (32, 64, 4, 3)],
    "dq": [(128, 32, 8, 3), (64, 64, 4, 3)],
}
_FP32 = {
    "fwd": [(64, 32, 4, 2), (32, 32, 4, 2)],
    "dkdv": [(32, 64, 4, 2), (32, 32, 4, 2)],
    "dq": [(64, 32, 4, 2), (32, 32, 4, 2)],
}


def _tuned(kernel, name: str):
    half, full = _configs(_HALF[name]), _configs(_FP32[name])

    def by_dtype(configs, named_args, **kwargs):
        return full if named_args["Q"].dtype == torch.float32 else half

    return triton.autotune(half + full, key=_KEY, prune_configs_by={"early_config_prune": by_dtype})(kernel)


_fwd_tuned = _tuned(_fwd_kernel, "fwd")
_dkdv_tuned = _tuned(_bwd_dkdv_kernel, "dkdv")
_dq_tuned = _tuned(_bwd_dq_kernel, "dq")


# ---------------------------------------------------------------- launchers
def _check(*tensors):
    q = tensors[0]
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors):
        raise ValueError(
            f"expected tensors of one (batch, heads, seq, head_dim) shape, got {[tuple(t.shape) for t in tensors]}"
        )
    if q.dtype not in DTYPES or any(t.dtype != q.dtype for t in tensors):
        raise ValueError(f"dtype must be one of fp32, bf16, fp16 and the same for all; got {q.dtype}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head_dim {q.shape[-1]} not supported by the kernel; use one of {HEAD_DIMS}")
    if q.device.type == "cpu" and not INTERPRET:
        raise ValueError("CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before importing triton")


def _strides(t):
    return tuple(t.stride())


def _precision(dtype):
    if dtype == torch.bfloat16 and INTERPRET:
        return "upcast"
    return "ieee" if dtype == torch.float32 else "tf32"


def _explicit(config):
    """Use fixed blocks (the interpreter, or a caller's config) rather than the autotuner."""
    return INTERPRET or config is not None


def flash_forward(q, k, v, causal: bool = False, scale: float | None = None, out=None, lse=None, config=None):
    """O (B, H, N, D) and the log-sum-exp of the scaled scores in base 2, L2 = L / ln 2 (B, H, N), fp32:
    the backward recomputes P = exp2(S log2 e - L2) from it, with no conversion to round. `out` and `lse`
    may be given (any strides for out; lse contiguous fp32); `config` = (BLOCK_M, BLOCK_N, warps, stages)
    skips tuning."""
    _check(q, k, v)
    b, h, n, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty(b, h, n, device=q.device, dtype=torch.float32) if lse is None else lse
    args = (q, k, v, out, lse, scale, *_strides(q), *_strides(k), *_strides(v), *_strides(out), h, n)
    meta = dict(HEAD_DIM=d, CAUSAL=bool(causal), PRECISION=_precision(q.dtype))
    if _explicit(config):
        bm, bn, warps, stages = config or DEFAULT_FWD
        if bm % bn:
            raise ValueError(f"BLOCK_M {bm} must be a multiple of BLOCK_N {bn}")
        _fwd_kernel[(triton.cdiv(n, bm), b * h)](
            *args, **meta, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages
        )
    else:
        _fwd_tuned[lambda m: (triton.cdiv(n, m["BLOCK_M"]), b * h)](*args, **meta)
    return out, lse


def flash_backward(
    q, k, v, o, lse, do, causal: bool = False, scale: float | None = None, dq=None, dk=None, dv=None, config=None
):
    """dQ, dK, dV from Q, K, V, O, L2 (base 2, from flash_forward) and dO; P is recomputed tile by tile."""
    _check(q, k, v, o, do)
    b, h, n, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    _check(q, dq, dk, dv)
    delta = torch.empty_like(lse)
    _bwd_delta_kernel[(triton.cdiv(n, 64), b * h)](
        o, do, delta, *_strides(o), *_strides(do), h, n, HEAD_DIM=d, BLOCK_M=64
    )
    common = (lse, delta, scale, *_strides(q), *_strides(k), *_strides(v), *_strides(do))
    dkdv_args = (q, k, v, do, dk, dv, *common, *_strides(dk), *_strides(dv), h, n)
    dq_args = (q, k, v, do, dq, *common, *_strides(dq), h, n)
    meta = dict(HEAD_DIM=d, CAUSAL=bool(causal), PRECISION=_precision(q.dtype))
    if _explicit(config):
        bm, bn, warps, stages = config or DEFAULT_BWD
        launch = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)
        _bwd_dkdv_kernel[(triton.cdiv(n, bn), b * h)](*dkdv_args, **meta, **launch)
        _bwd_dq_kernel[(triton.cdiv(n, bm), b * h)](*dq_args, **meta, **launch)
    else:
        _dkdv_tuned[lambda m: (triton.cdiv(n, m["BLOCK_N"]), b * h)](*dkdv_args, **meta)
        _dq_tuned[lambda m: (triton.cdiv(n, m["BLOCK_M"]), b * h)](*dq_args, **meta)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """O = softmax(Q K^T * scale) V; saves Q, K, V, O and L (O(N) memory), recomputes P in backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        o, lse = flash_forward(q, k, v, causal, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*flash_backward(q, k, v, o, lse, do, ctx.causal, ctx.scale), None, None)


def flash_attention(q, k, v, causal: bool = False, scale: float | None = None):
    return FlashAttention.apply(q, k, v, causal, scale)
