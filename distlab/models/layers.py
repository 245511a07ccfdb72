"""The pieces a modern decoder block is made of, written so that what each keeps for backward is known exactly:
normalisation as fused kernels do it, rotary position embeddings, dropout with a one-byte mask, the MLP.

Why not `nn.RMSNorm` / `F.rms_norm`: on this torch (2.13, CPU) it is decomposed into element-wise ops that
upcast to fp32 and save three fp32 copies of the input for backward (12 bytes per element against the 2 a
fused kernel keeps). Training code uses fused kernels (Apex's FusedRMSNorm, Transformer Engine, Megatron):
they keep the 16-bit input and one fp32 statistic per row, and recompute the normalised values in backward.
`RMSNorm` and `LayerNorm` here are those kernels' contract as autograd Functions, so the count is the one a
GPU run sees, on any device.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

STAT_DTYPE = torch.float32  # the statistics fused norms keep: one fp32 value per row (two for LayerNorm)


def _wide(x: torch.Tensor) -> torch.Tensor:
    """x in the statistics' dtype: fp32 for 16-bit inputs, as the kernels compute; float64 stays float64."""
    return x.to(torch.promote_types(x.dtype, STAT_DTYPE))


class _RMSNormFn(torch.autograd.Function):
    """y = x / rms(x) * w, rms(x) = sqrt(mean(x²) + eps), statistics in fp32 (Zhang & Sennrich 2019,
    https://arxiv.org/abs/1910.07467). Saves x (input dtype) and 1/rms per row (fp32)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = _wide(x)
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1) fp32
        ctx.save_for_backward(x, weight, rstd)
        return (x32 * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        x32, g32 = _wide(x), _wide(grad)
        xhat = x32 * rstd  # recomputed, not kept
        grad_weight = (g32 * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        gx = g32 * _wide(weight)
        grad_x = rstd * (gx - xhat * (gx * xhat).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, None


class _LayerNormFn(torch.autograd.Function):
    """y = (x - mean) / std * w + b (Ba et al. 2016), statistics in fp32. Saves x, the mean and 1/std per row
    (fp32), as CUDA's native layer norm and Apex's fused one do."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = _wide(x)
        mean = x32.mean(-1, keepdim=True)  # (..., 1) fp32
        rstd = torch.rsqrt((x32 - mean).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return ((x32 - mean) * rstd).to(x.dtype) * weight + bias

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, mean, rstd = ctx.saved_tensors
        x32, g32 = _wide(x), _wide(grad)
        xhat = (x32 - mean) * rstd
        rows = (-1, x.shape[-1])
        grad_weight = (g32 * xhat).reshape(rows).sum(0).to(weight.dtype)
        grad_bias = g32.reshape(rows).sum(0).to(weight.dtype)
        gx = g32 * _wide(weight)
        grad_x = rstd * (gx - gx.mean(-1, keepdim=True) - xhat * (gx * xhat).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, grad_bias, None


class RMSNorm(nn.Module):
    """Llama's norm: a weight, no bias, no mean subtraction."""

    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFn.apply(x, self.weight, self.eps)


class LayerNorm(nn.Module):
    """GPT's norm: weight and bias."""

    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _LayerNormFn.apply(x, self.weight, self.bias, self.eps)


def norm(kind: str, width: int) -> nn.Module:
    if kind == "rmsnorm":
        return RMSNorm(width)
    if kind == "layernorm":
        return LayerNorm(width)
    raise ValueError(f"norm must be rmsnorm or layernorm, not {kind!r}")


class RoPE(nn.Module):
    """Rotary position embeddings (Su et al. 2021, https://arxiv.org/abs/2104.09864), in the half-split layout
    Llama's Hugging Face port uses: x·cos + rotate_half(x)·sin. The cos and sin tables are buffers, computed once
    for the longest sequence and shared by every call; backward of a product with a constant needs only the
    constant, so rotating q and k keeps nothing per token."""

    def __init__(self, head_dim: int, max_seq: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {head_dim}")
        inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float64), inv)  # (S, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (S, D)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, S, heads, D)."""
        s, half = x.shape[1], x.shape[-1] // 2
        cos = self.cos[:s, None, :]  # (S, 1, D): a view of the buffer
        sin = self.sin[:s, None, :]
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


class MaskDropout(nn.Module):
    """Dropout that keeps a 1-byte bool mask for backward (torch.native_dropout), as PyTorch's CUDA kernel and
    Megatron do. nn.Dropout on CPU keeps its mask in the activation dtype (2 bytes in bf16)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return torch.native_dropout(x, self.p, True)[0]


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020, https://arxiv.org/abs/2002.05202): down(silu(gate(x)) · up(x)); or GPT's
    down(gelu(up(x))) with biases. `width` is this rank's share of the inner width."""

    def __init__(self, hidden: int, width: int, *, kind: str, dropout: float = 0.0):
        super().__init__()
        self.kind, bias = kind, kind == "gelu"
        self.gate = nn.Linear(hidden, width, bias=False) if kind == "swiglu" else None
        self.up = nn.Linear(hidden, width, bias=bias)
        self.down = nn.Linear(width, hidden, bias=bias)
        self.drop = MaskDropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            inner = F.silu(self.gate(x)) * self.up(x)
        else:
            inner = F.gelu(self.up(x))
        return self.drop(self.down(inner))
