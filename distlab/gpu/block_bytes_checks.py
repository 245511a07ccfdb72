"""The fused layer's byte count (block_bytes.fused_kernels, the stack the planner prices Megatron, Transformer Engine
and torch.compile runs with) worked by hand on four small layers, one claim on every page that shows the
planner's times (issue 26: the guard audit found a doubled norm statistic or a dropped dropout mask moving the
validation rows with no claim failing; the eager stacks are checked by counting real blocks, the fused one only here).

Each case is written kernel by kernel in bytes per element, the way a profiler trace of the fused layer reads:
a norm reads x and writes y in bf16 (2 + 2) and keeps its row statistics in fp32 (LayerNorm's mean and rstd: 8 bytes
a row, RMSNorm's rstd: 4); bias + dropout + add reads the GEMM output and the residual and writes the sum (2 + 2 + 2),
plus a one-byte mask with dropout; bias + GeLU reads and writes the MLP width (2 + 2), SwiGLU reads gate and up and
writes one (2 + 2 + 2). Backward: a norm reads dy and x, writes dx and re-reads its statistics; dropout's backward
reads the gradient and the mask and writes (2 + 1 + 2); every residual join adds two gradients (2 + 2 + 2); GeLU's
backward reads dy and x and writes dx (6), SwiGLU's reads dy, gate and up and writes two (10); the bias gradients read
their output gradients once (2); the q, k, v split's backward concatenates (2 + 2); rotary reads and writes q and k
(2 + 2) both ways. Sequence parallelism runs the residual stream's kernels on tokens / tp rows."""

from __future__ import annotations

from distlab.core.results import Result
from distlab.gpu.block_bytes import LayerSpec, layer_bytes


def _gpt_layer() -> tuple[LayerSpec, tuple[int, int]]:
    """GPT (LayerNorm, biases, GeLU), no TP, no dropout: 5 tokens, h = 6, f = 10."""
    T, h, f = 5, 6, 10
    spec = LayerSpec(tokens=T, seq=T, hidden=h, ffn=f, heads=3, kv_heads=3)
    forward = 2 * (4 * T * h + 8 * T) + 2 * 6 * T * h + 4 * T * f
    backward = 2 * (6 * T * h + 8 * T) + 2 * 6 * T * h + 6 * T * f + 2 * T * (3 * h + f + 2 * h) + 4 * T * 3 * h
    return spec, (forward, backward)


def _gpt_layer_tp2_sp_dropout() -> tuple[LayerSpec, tuple[int, int]]:
    """The same kind of layer on one of TP 2's ranks with sequence parallelism and dropout: 6 tokens (3 rows of the
    residual stream), h = 6, f = 10 (5 on this rank), 2 heads of 3 (1 on this rank)."""
    T, r, h, f = 6, 3, 6, 5
    spec = LayerSpec(tokens=T, seq=T, hidden=h, ffn=10, heads=2, kv_heads=2, tp=2, sequence_parallel=True, dropout=True)
    qkv = 3 * 3  # q, k and v of one head of 3 on this rank
    forward = 2 * (4 * r * h + 8 * r) + 2 * 7 * r * h + 4 * T * f
    backward = 2 * (6 * r * h + 8 * r) + 2 * 5 * r * h + 2 * 6 * r * h + 6 * T * f + 2 * (T * (qkv + f) + 2 * r * h)
    return spec, (forward, backward + 4 * T * qkv)


def _gpt_layer_standard_attention() -> tuple[LayerSpec, tuple[int, int]]:
    """The GPT layer with standard attention (Megatron before FlashAttention): CoreAttention's output is permuted and
    made contiguous, one more read and write of q's width (2 + 2) forward; the scores are priced elsewhere."""
    T, h, f = 5, 6, 10
    spec = LayerSpec(tokens=T, seq=T, hidden=h, ffn=f, heads=3, kv_heads=3, attention="standard")
    forward = 2 * (4 * T * h + 8 * T) + 2 * 6 * T * h + 4 * T * f + 4 * T * h
    backward = 2 * (6 * T * h + 8 * T) + 2 * 6 * T * h + 6 * T * f + 2 * T * (3 * h + f + 2 * h) + 4 * T * 3 * h
    return spec, (forward, backward)


def _llama_layer() -> tuple[LayerSpec, tuple[int, int]]:
    """Llama (RMSNorm, no biases, SwiGLU, rotary), grouped-query attention: 5 tokens, h = 8, 4 heads of 2 sharing
    2 K/V heads (K and V 4 wide each), f = 12."""
    T, h, f, q, kv = 5, 8, 12, 8, 4
    spec = LayerSpec(
        tokens=T, seq=T, hidden=h, ffn=f, heads=4, kv_heads=2, mlp="swiglu", norm="rmsnorm", rope=True, bias=False
    )
    forward = 2 * (4 * T * h + 4 * T) + 2 * 6 * T * h + 6 * T * f + 4 * T * (q + kv)
    backward = 2 * (6 * T * h + 4 * T) + 2 * 6 * T * h + 10 * T * f + 4 * T * (q + 2 * kv) + 4 * T * (q + kv)
    return spec, (forward, backward)


def fused_layer_pairs() -> list[tuple[int, int]]:
    """(fused stack, by hand) forward and backward bytes of the four layers."""
    pairs = []
    for case in (_gpt_layer, _gpt_layer_tp2_sp_dropout, _gpt_layer_standard_attention, _llama_layer):
        spec, by_hand = case()
        pairs += zip(layer_bytes("fused", spec), by_hand, strict=True)
    return pairs


def fused_layer_by_hand(r: Result) -> None:
    """One claim: the fused stack's (forward, backward) bytes on the four layers worked by hand, the worst gap."""
    gaps = [abs(a - b) for a, b in fused_layer_pairs()]
    r.claim(
        "fused layer bytes, 4 layers by hand: worst gap",
        max(gaps),
        0.0,
        abs_tol=0.5,
        unit="B",
    )
