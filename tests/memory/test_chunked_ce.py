"""Chunked cross-entropy (chapter 3): same loss and gradients as a float64 autograd reference at awkward sizes, and
the live-bytes counter against allocations whose sizes are known."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from distlab.memory.chunked_ce import ChunkedCrossEntropy, LiveBytes


def test_chunked_loss_and_gradients_match_float64_autograd():
    """97 tokens, vocabulary 257, chunks of 10 (a ragged last chunk of 7). Would catch a missing 1/N, the one-hot
    subtracted at the wrong column, or the last chunk dropped. Tolerances: the chunked head runs bf16 matmuls."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(97, 33, generator=g)
    w = torch.randn(257, 33, generator=g) / 33**0.5
    t = torch.randint(0, 257, (97,), generator=g)
    hx, wx = h.double().requires_grad_(), w.double().requires_grad_()
    ref = F.cross_entropy(hx @ wx.T, t)
    ref.backward()
    hc, wc = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = ChunkedCrossEntropy.apply(hc, wc, t, 10)
    (2 * loss).backward()  # a non-unit upstream gradient must scale both
    assert abs(loss.item() - ref.item()) <= 1e-2 * ref.item()
    for got, want in ((hc.grad, 2 * hx.grad), (wc.grad, 2 * wx.grad)):
        assert float((got.double() - want).norm() / want.norm()) <= 2e-2


def test_live_bytes_counts_allocations_and_frees():
    """Two 4000-byte tensors alive at once, then one freed: peak 8000, live 4000. Would catch frees never
    counted (peak = total allocated) or views counted as new storage."""
    with LiveBytes() as live:
        a = torch.ones(1000)  # 4000 B
        b = torch.ones(1000)
        view = a[:10]
        del b
        c = torch.ones(500)  # 2000 B, reuses nothing: b's bytes are already released
        assert live.live == 6000
    assert live.peak == 8000
    del a, view, c
