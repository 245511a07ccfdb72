"""A decoder block with the switches that decide what it keeps for backward: SwiGLU or GeLU MLP of any width,
grouped-query attention with any number of KV heads, RoPE, RMSNorm or LayerNorm, dropout on or off, and
attention written out (eager, the s x s matrices materialised) or through PyTorch's fused
scaled_dot_product_attention (SDPA: FlashAttention's algorithm, which keeps the output and one log-sum-exp per
row instead of the s x s matrices). With `BlockShape(mlp="gelu", norm="layernorm", rope=False, dropout=True,
kv_heads=heads)` and eager attention it is Korthikanti et al.'s GPT block; with the defaults, Llama's.

An MoE block (Mixtral) replaces the MLP by distlab.models.moe.MoE. `tp` builds one rank's shard of a
Megatron tensor-parallel layer (heads, KV heads and the MLP width divided by t; the norms and the residual
stream whole), which is what that rank computes and keeps; the all-reduces between ranks keep nothing.

Layout: q, k, v stay (B, S, heads, D) as the projections produce them and are handed to attention as transposed
views, the layout FlashAttention works in; its output then reshapes to the output projection's input without a
copy, so one buffer serves both backward passes.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from distlab.models.layers import MLP, MaskDropout, RoPE, norm
from distlab.models.moe import MoE
from distlab.models.shapes import BlockShape

ATTENTION = ("eager", "sdpa")


def local_kv_heads(kv_heads: int, tp: int) -> int:
    """KV heads on one of t tensor-parallel ranks: g/t, or one replicated head when t > g."""
    if kv_heads % tp and tp % kv_heads:
        raise ValueError(f"kv heads ({kv_heads}) and TP ({tp}) must divide one another")
    return max(kv_heads // tp, 1)


class AttentionCore(nn.Module):
    """softmax(QKᵀ/√d + causal mask)·V on (B, S, heads, D) inputs: the part selective recompute recomputes."""

    def __init__(self, heads: int, kv_heads: int, *, kind: str, dropout: float, max_seq: int):
        super().__init__()
        if kind not in ATTENTION:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION)}, not {kind!r}")
        self.heads, self.kv_heads, self.kind, self.p = heads, kv_heads, kind, dropout
        self.drop = MaskDropout(dropout) if dropout else nn.Identity()
        if kind == "eager":  # an additive -inf above the diagonal: adding a constant keeps nothing for backward
            causal = torch.full((max_seq, max_seq), float("-inf")).triu(1)
            self.register_buffer("causal", causal, persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.eager(q, k, v) if self.kind == "eager" else self.sdpa(q, k, v)

    def eager(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Written out, as Megatron's unfused path and Hugging Face's eager attention do: K and V are repeated to
        every query head (a copy), then the matmuls keep their operands and softmax its output."""
        b, s, _, d = q.shape
        group = self.heads // self.kv_heads
        if group > 1:  # repeat_kv: (B, S, g, D) -> (B, S, a, D)
            wide = (b, s, self.kv_heads, group, d)
            k, v = (t[:, :, :, None, :].expand(wide).reshape(b, s, self.heads, d) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, a, S, D) views
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # (B, a, S, S)
        probs = self.drop(F.softmax(scores + self.causal[:s, :s], dim=-1))
        return (probs @ v).transpose(1, 2)  # (B, S, a, D), not contiguous

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The fused kernel, grouped-query attention native (enable_gqa: K and V are not repeated)."""
        p = self.p if self.training else 0.0
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=p, is_causal=True, enable_gqa=True
        )  # (B, a, S, D) laid out as (B, S, a, D)
        return y.transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, shape: BlockShape, *, attention: str, dropout: float, tp: int, max_seq: int):
        super().__init__()
        h, d, bias = shape.hidden, shape.head_dim, shape.mlp == "gelu"  # GPT has biases, Llama none
        if shape.heads % tp:
            raise ValueError(f"heads ({shape.heads}) must be divisible by TP ({tp})")
        self.heads, self.kv_heads, self.d = shape.heads // tp, local_kv_heads(shape.kv_heads, tp), d
        self.q_proj = nn.Linear(h, self.heads * d, bias=bias)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=bias)
        self.rope = RoPE(d, max_seq) if shape.rope else None
        self.core = AttentionCore(self.heads, self.kv_heads, kind=attention, dropout=dropout, max_seq=max_seq)
        self.o_proj = nn.Linear(self.heads * d, h, bias=bias)  # row-parallel: its output is all-reduced over t
        self.drop = MaskDropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d)  # (B, S, a, D)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d)  # (B, S, g, D)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.d)
        if self.rope is not None:
            q, k = self.rope(q), self.rope(k)
        y = self.core(q, k, v)  # (B, S, a, D)
        return self.drop(self.o_proj(y.reshape(b, s, self.heads * self.d)))


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, https://arxiv.org/abs/2405.04434, Section 2.1; the V3 code's
    "naive" mode): queries and keys/values go through low-rank latents with their own RMSNorm, are decompressed
    per head, and a shared rotary key of width d_r is appended to every head. The KV cache shrinks to the
    latent at inference; in training every head's K and V are decompressed and kept like MHA's, and the latents
    are kept too. Eager attention only: q/k and v differ in width, and PyTorch's fused CPU kernel then falls back
    to its fp32 math path."""

    def __init__(self, shape: BlockShape, *, attention: str, dropout: float, tp: int, max_seq: int):
        super().__init__()
        if attention != "eager":
            raise ValueError("MLA is counted with eager attention (its q/k and v widths differ)")
        if shape.heads % tp:
            raise ValueError(f"heads ({shape.heads}) must be divisible by TP ({tp})")
        h, self.heads = shape.hidden, shape.heads // tp
        self.dn, self.dr, self.dv = shape.qk_nope_head_dim, shape.qk_rope_head_dim, shape.v_head_dim
        self.r_kv, q_width = shape.kv_lora_rank, self.heads * (self.dn + self.dr)
        if shape.q_lora_rank:
            self.q_a = nn.Linear(h, shape.q_lora_rank, bias=False)  # replicated on every rank
            self.q_norm = norm("rmsnorm", shape.q_lora_rank)
            self.q_b = nn.Linear(shape.q_lora_rank, q_width, bias=False)  # column-parallel by heads
        else:
            self.q_proj = nn.Linear(h, q_width, bias=False)
        self.kv_a = nn.Linear(h, self.r_kv + self.dr, bias=False)  # the latent and the shared rotary key
        self.kv_norm = norm("rmsnorm", self.r_kv)
        self.kv_b = nn.Linear(self.r_kv, self.heads * (self.dn + self.dv), bias=False)
        self.rope = RoPE(self.dr, max_seq)
        self.core = AttentionCore(self.heads, self.heads, kind="eager", dropout=dropout, max_seq=max_seq)
        self.o_proj = nn.Linear(self.heads * self.dv, h, bias=False)
        self.drop = MaskDropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_b(self.q_norm(self.q_a(x))) if hasattr(self, "q_a") else self.q_proj(x)
        q_nope, q_rot = q.view(b, s, self.heads, self.dn + self.dr).split([self.dn, self.dr], dim=-1)
        q = torch.cat([q_nope, self.rope(q_rot)], dim=-1)  # (B, S, a, dn + dr)
        latent, k_rot = self.kv_a(x).split([self.r_kv, self.dr], dim=-1)
        k_rot = self.rope(k_rot[:, :, None, :]).expand(b, s, self.heads, self.dr)  # one rotary key for all heads
        kv = self.kv_b(self.kv_norm(latent)).view(b, s, self.heads, self.dn + self.dv)
        k_nope, v = kv.split([self.dn, self.dv], dim=-1)
        k = torch.cat([k_nope, k_rot], dim=-1)  # (B, S, a, dn + dr)
        y = self.core(q, k, v)  # (B, S, a, dv)
        return self.drop(self.o_proj(y.reshape(b, s, self.heads * self.dv)))


class DecoderBlock(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(
        self,
        shape: BlockShape,
        *,
        attention: str = "sdpa",
        dropout: float = 0.1,
        capacity_factor: float | None = None,
        tp: int = 1,
        max_seq: int = 4096,
    ):
        super().__init__()
        p = dropout if shape.dropout else 0.0
        if shape.ffn % tp:
            raise ValueError(f"MLP width ({shape.ffn}) must be divisible by TP ({tp})")
        self.shape = shape
        self.attn_norm = norm(shape.norm, shape.hidden)
        kind = LatentAttention if shape.mla else Attention
        self.attn = kind(shape, attention=attention, dropout=p, tp=tp, max_seq=max_seq)
        self.mlp_norm = norm(shape.norm, shape.hidden)
        if shape.moe:
            self.mlp = MoE(shape, capacity_factor=capacity_factor, tp=tp, dropout=p)
        else:
            self.mlp = MLP(shape.hidden, shape.ffn // tp, kind=shape.mlp, dropout=p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))
