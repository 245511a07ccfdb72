"""A Mixtral-style mixture-of-experts MLP (Jiang et al. 2024, https://arxiv.org/abs/2401.04088, Section 2.1):
a router picks the top k of E SwiGLU experts per token, G(x) = Softmax(TopK(x·W_g)), and the output is the
gate-weighted sum of the chosen experts' outputs. Written so that what it keeps for backward has a closed form
(distlab.memory.layer_activations.moe_terms):

- **dropless** (capacity_factor None, as Mixtral and Megatron's default): every expert takes every token routed
  to it, so the experts process exactly T·k token-slots for T tokens, however the router splits them;
- **with a capacity** C = ⌈cf·T·k/E⌉ (GShard, Lepikhin et al. 2020, https://arxiv.org/abs/2006.16668): an
  expert takes at most C slots, first choices before second ones and then in token order; the rest are dropped
  (the residual carries the token), and an expert with fewer is padded to C, so every expert processes exactly
  C slots (E·C in all) and the memory reserved is known before the router has run.

Slots are laid out expert after expert: one gather of the token rows (x[token]), each expert on its slice,
one scatter-add back weighted by the gates (a padding slot reads token 0 with gate 0). The scatter-add is
`index_put(accumulate=True)`, which keeps only the index for backward; `index_add` (and the `index_add_` of
Hugging Face's Mixtral) keeps the weighted outputs a second time, because PyTorch's derivative formula for it
reads the source tensor's shape through the tensor itself.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from distlab.models.layers import MLP, MaskDropout
from distlab.models.shapes import BlockShape


def capacity(tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """C = ⌈cf · T · k / E⌉ slots per expert."""
    return math.ceil(capacity_factor * tokens * top_k / experts)


class MoE(nn.Module):
    def __init__(self, shape: BlockShape, *, capacity_factor: float | None = None, tp: int = 1, dropout: float = 0.0):
        super().__init__()
        if not shape.moe:
            raise ValueError("MoE needs a block shape with experts")
        if capacity_factor is not None and not capacity_factor > 0:
            raise ValueError(f"capacity factor must be positive, got {capacity_factor}")
        self.experts_n, self.top_k, self.capacity_factor = shape.experts, shape.top_k, capacity_factor
        self.router = nn.Linear(shape.hidden, shape.experts, bias=False)
        self.experts = nn.ModuleList(MLP(shape.hidden, shape.ffn // tp, kind="swiglu") for _ in range(shape.experts))
        self.drop = MaskDropout(dropout) if dropout else nn.Identity()
        self.loads: list[int] = []
        """Slots each expert processed in the last forward (for the closed form's per-expert terms)."""

    @torch.no_grad()
    def slots(self, choice: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """choice (T, k): expert per token and rank. Returns, per slot, its token and its index into the flat
        (T·k) gates (T·k for a padding slot, which reads an appended zero), and the slots per expert."""
        t, k = choice.shape
        by_priority = choice.T.reshape(-1)  # all first choices in token order, then all second choices, ...
        flat = torch.arange(k, device=choice.device)[:, None] + k * torch.arange(t, device=choice.device)[None, :]
        flat = flat.reshape(-1)  # the same order, as indices into gates.flatten() (row t, column j -> t·k + j)
        order = torch.argsort(by_priority, stable=True)  # grouped by expert, priority kept
        load = torch.bincount(by_priority, minlength=self.experts_n).tolist()
        cap = None if self.capacity_factor is None else capacity(t, self.experts_n, k, self.capacity_factor)
        gate_index, start, loads = [], 0, []
        for n in load:
            mine = flat[order[start : start + n]]
            start += n
            if cap is not None:  # drop beyond the capacity, pad up to it
                mine = torch.cat([mine[:cap], mine.new_full((max(cap - n, 0),), t * k)])
            gate_index.append(mine)
            loads.append(len(mine))
        gate_index = torch.cat(gate_index)
        token = torch.where(gate_index < t * k, gate_index // k, 0)
        return token, gate_index, loads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        xt = x.reshape(b * s, h)  # (T, h), a view
        top, choice = self.router(xt).topk(self.top_k, dim=-1)  # (T, k): logits and experts
        gates = F.softmax(top, dim=-1, dtype=torch.float32).to(x.dtype)  # softmax over the k chosen logits
        token, gate_index, self.loads = self.slots(choice)
        xs = xt.index_select(0, token)  # (N, h): slot rows, expert after expert
        weight = torch.cat([gates.reshape(-1), gates.new_zeros(1)]).index_select(0, gate_index)  # (N,)
        outs, start = [], 0
        for expert, n in zip(self.experts, self.loads):
            outs.append(expert(xs[start : start + n]))
            start += n
        ys = torch.cat(outs)  # (N, h)
        out = torch.zeros_like(xt).index_put((token,), ys * weight[:, None], accumulate=True)  # (T, h)
        return self.drop(out.view(b, s, h))
