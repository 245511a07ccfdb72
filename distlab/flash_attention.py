"""Attention three ways: naive (materialises the N x N scores), tiled with an online softmax (PyTorch,
the FlashAttention algorithm in plain tensors), and a Triton kernel (distlab.flash_attention_triton).

Shapes are (B, H, N, D): batch, heads, sequence, head dim. The scale is 1/sqrt(D) unless given.

The online softmax (Milakov and Gimelshein 2018; FlashAttention, Dao et al. 2022, Section 3.1): a row's
softmax over blocks of keys keeps a running max m and a running sum l. A new block with scores s moves
the max to m' = max(m, max s), rescales what was summed so far by exp(m - m'), and adds exp(s - m').
At the end O = acc / l and the log-sum-exp L = m + log l is all the backward pass needs: it recomputes
P = exp(S - L) block by block instead of storing the N x N matrix P.

Experiments: `flash-attention-exact` (the three agree, to float64 rounding for the tiled one and to
PyTorch's own same-dtype error for the kernel) and `flash-attention-memory` (peak memory grows as N^2
for naive attention and as N for the tiled one).
"""

from __future__ import annotations

import math

import torch

IMPLS = ("triton", "tiled", "naive")


# ---------------------------------------------------------------- naive: S and P materialised
def naive_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """softmax(Q K^T * scale) V in the inputs' dtype; autograd saves the N x N matrix P."""
    scale = _scale(q, scale)
    s = (q @ k.transpose(-1, -2)) * scale  # (B, H, N, N)
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v  # (B, H, N, D)


# ---------------------------------------------------------------- tiled: online softmax, O(N) memory
def tiled_forward(q, k, v, causal: bool = False, scale: float | None = None, block_m: int = 64,
                  block_n: int = 64):
    """FlashAttention's forward over (block_m x block_n) tiles. Returns O and the log-sum-exp L (B, H, N).

    Accumulates in float32 (float64 for float64 inputs), as the kernel does."""
    scale = _scale(q, scale)
    acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    b, h, n, d = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, dtype=acc_dtype, device=q.device)
    for i0 in range(0, n, block_m):
        i1 = min(i0 + block_m, n)
        qi = q[:, :, i0:i1].to(acc_dtype) * scale  # (B, H, bm, D)
        m = torch.full((b, h, i1 - i0), float("-inf"), dtype=acc_dtype, device=q.device)
        l = torch.zeros_like(m)  # noqa: E741 - the paper's symbol
        acc = torch.zeros(b, h, i1 - i0, d, dtype=acc_dtype, device=q.device)
        for j0 in range(0, i1 if causal else n, block_n):
            j1 = min(j0 + block_n, n)
            s = qi @ k[:, :, j0:j1].to(acc_dtype).transpose(-1, -2)  # (B, H, bm, bn)
            if causal and j1 > i0:
                s = s.masked_fill(_above_diagonal(i0, i1, j0, j1, q.device), float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)  # rescales what was summed under the old max
            l = l * alpha + p.sum(-1)  # noqa: E741
            acc = acc * alpha[..., None] + p @ v[:, :, j0:j1].to(acc_dtype)
            m = m_new
        o[:, :, i0:i1] = (acc / l[..., None]).to(q.dtype)
        lse[:, :, i0:i1] = m + torch.log(l)
    return o, lse


def tiled_backward(q, k, v, o, lse, do, causal: bool = False, scale: float | None = None,
                   block_m: int = 64, block_n: int = 64):
    """FlashAttention's backward: P recomputed per tile from the saved L, never stored whole.

    dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q."""
    scale = _scale(q, scale)
    acc_dtype = lse.dtype
    n = q.shape[-2]
    delta = (do.to(acc_dtype) * o.to(acc_dtype)).sum(-1)  # (B, H, N): rowsum(dO * O) = rowsum(P * dP)
    dq = torch.zeros(q.shape, dtype=acc_dtype, device=q.device)
    dk, dv = torch.zeros_like(dq), torch.zeros_like(dq)
    for j0 in range(0, n, block_n):
        j1 = min(j0 + block_n, n)
        kj, vj = k[:, :, j0:j1].to(acc_dtype), v[:, :, j0:j1].to(acc_dtype)  # (B, H, bn, D)
        for i0 in range((j0 // block_m) * block_m if causal else 0, n, block_m):
            i1 = min(i0 + block_m, n)
            qi, doi = q[:, :, i0:i1].to(acc_dtype), do[:, :, i0:i1].to(acc_dtype)
            s = (qi @ kj.transpose(-1, -2)) * scale  # (B, H, bm, bn)
            if causal and j1 > i0:
                s = s.masked_fill(_above_diagonal(i0, i1, j0, j1, q.device), float("-inf"))
            p = torch.exp(s - lse[:, :, i0:i1, None])
            dv[:, :, j0:j1] += p.transpose(-1, -2) @ doi
            ds = p * (doi @ vj.transpose(-1, -2) - delta[:, :, i0:i1, None])
            dq[:, :, i0:i1] += (ds @ kj) * scale
            dk[:, :, j0:j1] += (ds.transpose(-1, -2) @ qi) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class TiledAttention(torch.autograd.Function):
    """The tiled reference as an autograd Function: saves Q, K, V, O and L (all O(N)), not P."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_m=64, block_n=64):
        o, lse = tiled_forward(q, k, v, causal, scale, block_m, block_n)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = causal, scale, block_m, block_n
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*tiled_backward(q, k, v, o, lse, do, *ctx.args), None, None, None, None)


def _above_diagonal(i0, i1, j0, j1, device):
    """True where key j > query i inside the tile: the causal mask."""
    rows = torch.arange(i0, i1, device=device)[:, None]
    cols = torch.arange(j0, j1, device=device)[None, :]
    return cols > rows


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


# ---------------------------------------------------------------- the public entry
def attention(q, k, v, causal: bool = False, impl: str = "triton", scale: float | None = None):
    """softmax(Q K^T / sqrt(D)) V for (B, H, N, D) tensors, differentiable, with impl "triton" (the
    kernel; Triton's interpreter on CPU), "tiled" (PyTorch online softmax) or "naive"."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, not {impl!r}")
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k, v must share one (batch, heads, seq, head_dim) shape; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if impl == "naive":
        return naive_attention(q, k, v, causal, scale)
    if impl == "tiled":
        return TiledAttention.apply(q, k, v, causal, scale)
    from distlab.flash_attention_triton import flash_attention

    return flash_attention(q, k, v, causal, scale)


def random_qkv(b, h, n, d, dtype=torch.float32, device="cpu", seed=0, requires_grad=True):
    """Standard-normal Q, K, V (and dO), generated in float64 on the CPU so every dtype and device
    sees the same values up to rounding."""
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
           for _ in range(4)]
    for t in out[:3]:
        t.requires_grad_(requires_grad)
    return out


def forward_backward(impl, q, k, v, do, causal=False):
    """O, dQ, dK, dV of one implementation (fresh leaves, so calls do not share gradients)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = attention(q, k, v, causal, impl)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad


# ---------------------------------------------------------------- peak memory
def peak_bytes(fn, device: str) -> int:
    """Peak bytes allocated while fn() runs, above what was allocated before: the caching allocator's
    max_memory_allocated on a GPU; on a CPU the allocator's own events, recorded by torch.profiler
    (every allocation and free in order; the peak of their running sum)."""
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak
