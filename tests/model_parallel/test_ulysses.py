"""Ulysses and all-gather-KV context parallelism against float64 full attention written independently (one
softmax over the whole score matrix, key/value heads expanded by index), their bytes counted by the simulation
against cp_choice's formulas, and the choosing rule's invariants. float64 results agree to rounding (1e-12)."""

import math

import pytest
import torch

from distlab.model_parallel.cp_choice import (
    allgather_kv_bytes_per_rank,
    choose_context_parallel,
    context_parallel_options,
    ring_bytes_per_rank,
    ulysses_bytes_per_rank,
    ulysses_feasible,
)
from distlab.model_parallel.ulysses import allgather_kv_attention, ulysses_attention


def naive_attention(q, k, v):
    """Causal GQA attention, query head i using key/value head i // (h/g), one head at a time."""
    b, h, n, d = q.shape
    g = k.shape[1]
    out = torch.empty_like(q)
    mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    for i in range(h):
        s = q[:, i] @ k[:, i // (h // g)].transpose(-2, -1) / math.sqrt(d)
        out[:, i] = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v[:, i // (h // g)]
    return out


def _qkv(h, g, n, d=5, b=1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, n, d, generator=gen, dtype=torch.float64),
        torch.randn(b, g, n, d, generator=gen, dtype=torch.float64),
        torch.randn(b, g, n, d, generator=gen, dtype=torch.float64),
    )


@pytest.mark.parametrize("h,g,n,c", [(6, 3, 99, 3), (6, 3, 102, 6), (6, 6, 98, 2), (4, 1, 100, 4), (6, 2, 97, 1)])
def test_ulysses_equals_full_attention(h, g, n, c):
    """Catches a head routed to the wrong rank, a key/value head paired with the wrong query heads (c > g copies
    included) or tokens put back out of order."""
    q, k, v = _qkv(h, g, n)
    out, sent = ulysses_attention(q, k, v, c)
    assert (out - naive_attention(q, k, v)).abs().max().item() < 1e-12
    assert max(sent) == pytest.approx(ulysses_bytes_per_rank(n, c, h, g, 5, 8), rel=1e-12)


@pytest.mark.parametrize("h,g,c,n", [(6, 3, 3, 102), (4, 2, 2, 100), (6, 6, 5, 110), (4, 1, 1, 98)])
def test_allgather_kv_equals_full_attention(h, g, c, n):
    """Catches a zigzag chunk attended with the wrong causal offset, or keys gathered out of order; and bytes
    that are not the ring's."""
    q, k, v = _qkv(h, g, n)
    out, sent = allgather_kv_attention(q, k, v, c)
    assert (out - naive_attention(q, k, v)).abs().max().item() < 1e-12
    assert max(sent) == pytest.approx(allgather_kv_bytes_per_rank(n, c, g * 5, 8), rel=1e-12)
    assert max(sent) == pytest.approx(ring_bytes_per_rank(n, c, g * 5, 8), rel=1e-12)


def test_ulysses_rejects_heads_it_cannot_split():
    """Catches Ulysses silently running with c not dividing the heads (a rank would get a fraction of a head)."""
    q, k, v = _qkv(6, 3, 96)
    assert not ulysses_feasible(4, 6, 3)
    with pytest.raises(ValueError, match="heads"):
        ulysses_attention(q, k, v, 4)


@pytest.mark.parametrize("h,g", [(64, 8), (32, 32), (12, 4)])
def test_ulysses_beats_ring_bytes_iff(h, g):
    """Catches a wrong all-to-all volume: for c <= g, Ulysses sends fewer bytes than the ring exactly when
    c > 1 + h/g (with the counts taken from the simulation at small sizes)."""
    for c in [c for c in range(2, g + 1) if h % c == 0 and g % c == 0]:
        fewer = ulysses_bytes_per_rank(4096, c, h, g, 128) < ring_bytes_per_rank(4096, c, g * 128)
        assert fewer == (c > 1 + h / g)


def test_rule():
    """Catches the rule picking an infeasible Ulysses, a ring that is not hidden over a cheaper option, or the
    all-gather outside its slack."""
    base = dict(seq=131072, heads=64, kv_heads=8, head_dim=128, flops_per_s=989e12)
    for c in (2, 3, 4, 6, 8, 16):
        for bw in (50e9, 450e9):
            best = choose_context_parallel(ranks=c, link_bytes_per_s=bw, **base)
            opts = context_parallel_options(ranks=c, link_bytes_per_s=bw, **base)
            feasible = [o for o in opts if o.feasible]
            assert best in feasible
            gather = next(o for o in opts if o.option == "allgather-kv")
            if best.option != "allgather-kv":
                assert gather.exposed_seconds > 0.05 * gather.attention_seconds
                assert best.exposed_seconds == min(o.exposed_seconds for o in feasible)
    assert choose_context_parallel(ranks=3, link_bytes_per_s=1e9, **base).option != "ulysses"  # 3 does not divide 8
    with pytest.raises(ValueError):
        choose_context_parallel(ranks=0, link_bytes_per_s=1e9, **base)
