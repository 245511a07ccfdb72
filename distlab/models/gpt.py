"""A small decoder-only transformer (GPT-2 shape, after nanoGPT) that the experiments really train.

Written out in full (no SDPA, no fused kernels) so that every tensor it saves, every FLOP it does and
every byte it keeps can be counted by the experiments that use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    vocab: int = 512
    """Vocabulary size (token ids 0..vocab-1)."""
    seq: int = 64
    """Maximum sequence length (learned position embeddings)."""
    layers: int = 2
    """Number of transformer blocks."""
    hidden: int = 64
    """Model width h."""
    heads: int = 4
    """Attention heads a; hidden must divide by it."""
    ffn: int | None = None
    """MLP inner width; default 4h."""
    dropout: float = 0.0
    """Dropout probability after attention, after the MLP and on attention probabilities."""
    tie_embeddings: bool = True
    """Share the token embedding with the output projection (GPT-2 does)."""

    def __post_init__(self) -> None:
        for name in ("vocab", "seq", "layers", "hidden", "heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"GPTConfig.{name} must be positive, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def ffn_width(self) -> int:
        return self.ffn or 4 * self.hidden


def param_count(cfg: GPTConfig) -> int:
    """Closed form for GPTConfig's parameters, written independently of the module (tests compare)."""
    h, f = cfg.hidden, cfg.ffn_width
    per_layer = (
        2 * 2 * h  # two LayerNorms, weight + bias
        + 3 * h * h
        + 3 * h  # fused q, k, v projection
        + h * h
        + h  # attention output projection
        + h * f
        + f
        + f * h
        + h  # MLP up and down
    )
    embed = cfg.vocab * h + cfg.seq * h
    head = 0 if cfg.tie_embeddings else cfg.vocab * h
    return cfg.layers * per_layer + embed + 2 * h + head  # + final LayerNorm


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(QK^T / sqrt(d) + causal mask) V: the part selective recompute recomputes."""
        n = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, N, N)
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = self.attn_drop(F.softmax(scores, dim=-1))
        return probs @ v  # (B, H, N, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.view(b, n, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = self.core(q, k, v).transpose(1, 2).reshape(b, n, h)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden, cfg.ffn_width)
        self.down = nn.Linear(cfg.ffn_width, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        n = idx.shape[1]
        if n > self.cfg.seq:
            raise ValueError(f"sequence {n} longer than the model's {self.cfg.seq}")
        x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device))  # (B, N, h)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))  # (B, N, vocab)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def random_batch(cfg: GPTConfig, batch: int, *, seed: int = 0, device: str = "cpu"):
    """Token ids and next-token targets from a fixed generator (deterministic across ranks and runs)."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=g)
    return data[:, :-1].to(device), data[:, 1:].to(device)


def reference_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The same network by another route, in float64: functional ops and torch's own causal attention
    (`scaled_dot_product_attention`) read the module's weights, so a slip in GPT's hand-written forward (a residual,
    the 1/sqrt(d) scale, the mask, the head split, the position embedding) shows up as a difference."""
    w = {k: v.double() for k, v in model.state_dict().items()}
    cfg = model.cfg
    b, n = idx.shape
    d = cfg.hidden // cfg.heads
    x = F.embedding(idx, w["tok.weight"]) + w["pos.weight"][:n]

    def ln(name: str, t: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(t, (cfg.hidden,), w[name + ".weight"], w[name + ".bias"])

    for i in range(cfg.layers):
        p = f"blocks.{i}."
        q, k, v = F.linear(ln(p + "ln1", x), w[p + "attn.qkv.weight"], w[p + "attn.qkv.bias"]).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, cfg.heads, d).permute(0, 2, 1, 3) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b, n, cfg.hidden)
        x = x + F.linear(y, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"])
        up = F.gelu(F.linear(ln(p + "ln2", x), w[p + "mlp.up.weight"], w[p + "mlp.up.bias"]))
        x = x + F.linear(up, w[p + "mlp.down.weight"], w[p + "mlp.down.bias"])
    x = ln("ln_f", x)
    return F.linear(x, w["tok.weight"] if cfg.tie_embeddings else w["head.weight"])
