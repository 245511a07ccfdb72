"""Ring attention against PyTorch's own scaled_dot_product_attention in float64 (an independent
implementation), and its bookkeeping against brute-force counts over the full causal mask."""

import pytest
import torch
from torch.nn import functional as F

from distlab.model_parallel.context_parallel import (
    causal_imbalance,
    chunks_of_rank,
    forward_bytes_per_rank,
    ring_attention,
)


def _qkv(b=2, h=3, n=102, d=20, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


@pytest.mark.parametrize(
    ("ranks", "order", "causal"),
    [(3, "zigzag", True), (3, "contiguous", True), (1, "zigzag", True), (6, "contiguous", False)],
)
def test_float64_ring_equals_sdpa(ranks, order, causal):
    """Sequence 102 = 6 chunks of 17 (odd chunk size). Would catch a wrong rescale in the online
    softmax (errors of O(1)), a causal mask on the wrong diagonal, or a chunk written back to the wrong
    place in the zigzag order."""
    q, k, v = _qkv()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    got, _ = ring_attention(q, k, v, ranks, causal=causal, order=order)
    assert (got - want).abs().max().item() < 1e-12


def test_float32_ring_and_its_gradients_are_as_close_as_plain_float32():
    """The FlashAttention rule: error vs float64 at most 2x PyTorch's own float32 error (+ 1 ulp)."""
    q64, k64, v64 = _qkv()
    dout = torch.randn_like(q64)

    def run(fn, dtype):
        q, k, v = (x.to(dtype).detach().clone().requires_grad_(True) for x in (q64, k64, v64))
        out = fn(q, k, v)
        out.backward(dout.to(dtype))
        return [out.detach().double()] + [x.grad.double() for x in (q, k, v)]

    ref = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), torch.float64)
    plain = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), torch.float32)
    ring = run(lambda q, k, v: ring_attention(q, k, v, 3, causal=True, order="zigzag")[0], torch.float32)
    for r, p, g in zip(ref, plain, ring):
        assert (g - r).abs().max() <= 2 * (p - r).abs().max() + 2.0**-23


@pytest.mark.parametrize(("ranks", "order"), [(3, "zigzag"), (3, "contiguous"), (6, "contiguous"), (1, "zigzag")])
def test_unmasked_pairs_match_brute_force(ranks, order):
    """Count each rank's (query, key) pairs from the full N x N causal mask. Zigzag: equal work."""
    n, b, h = 102, 2, 3
    q, k, v = _qkv(b, h, n)
    _, stats = ring_attention(q, k, v, ranks, causal=True, order=order)
    n_chunks = ranks * (2 if order == "zigzag" else 1)
    c = n // n_chunks
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    brute = [
        sum(int(mask[i * c : (i + 1) * c].sum()) for i in chunks_of_rank(r, ranks, order)) * b * h for r in range(ranks)
    ]
    assert stats["unmasked_pairs"] == brute
    assert max(brute) / (sum(brute) / ranks) == pytest.approx(causal_imbalance(ranks, order, c), rel=1e-12)
    if order == "zigzag":
        assert len(set(brute)) == 1


def test_bytes_sent_per_rank():
    """Each rank forwards R-1 key/value blocks of N/R tokens (the last hop is not sent)."""
    q, k, v = _qkv(n=96, dtype=torch.float32)
    _, stats = ring_attention(q, k, v, 4, causal=True, order="zigzag")
    assert stats["bytes_sent"] == [3 * 2 * 24 * 3 * 20 * 4 * 2] * 4
    assert forward_bytes_per_rank(96, 4, 60, 4) * 2 == 3 * 2 * 24 * 60 * 4 * 2


def test_indivisible_sequence_is_a_value_error():
    q, k, v = _qkv(n=100)
    with pytest.raises(ValueError, match="divisible"):
        ring_attention(q, k, v, 3, order="zigzag")
    with pytest.raises(ValueError, match="order"):
        chunks_of_rank(0, 2, "striped")
