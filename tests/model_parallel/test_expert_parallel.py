"""The MoE layer and its expert-parallel split against a naive per-token loop in float64 (GShard's
capacity rule written out one assignment at a time), at awkward sizes: 90 tokens, 6 experts, 3 ranks."""

import math

import pytest
import torch
from torch.nn import functional as F

from distlab.model_parallel.expert_parallel import (
    MoE,
    MoEConfig,
    dropped_fraction,
    expert_parallel_forward,
    zipf_tokens,
)


def naive_moe(moe: MoE, x: torch.Tensor, groups: int):
    """Loop over groups, then choice level (first choices first), then tokens in order; an expert
    accepts while it has fewer than ceil(cf T_group k / E) assignments from this group."""
    cfg = moe.cfg
    x = x.double()
    probs = torch.softmax(x @ moe.router.weight.double().T, -1)
    out = torch.zeros_like(x)
    per_group = x.shape[0] // groups
    cap = math.ceil(cfg.capacity_factor * per_group * cfg.top_k / cfg.experts)
    kept = dropped = 0
    remote = 0
    local = cfg.experts // groups
    for g in range(groups):
        used = [0] * cfg.experts
        for choice in range(cfg.top_k):
            for tok in range(g * per_group, (g + 1) * per_group):
                top = torch.topk(probs[tok], cfg.top_k)
                e = int(top.indices[choice])
                gate = top.values[choice] / top.values.sum()
                if used[e] >= cap:
                    dropped += 1
                    continue
                used[e] += 1
                kept += 1
                remote += e // local != g
                h = F.gelu(x[tok] @ moe.up[e].double()) @ moe.down[e].double()
                out[tok] += gate * h
    return out, dropped / (kept + dropped), remote


@pytest.mark.parametrize("cf", [0.5, 0.8, 1.0, 4.0])
def test_expert_parallel_matches_naive_loop(cf):
    """Would catch second choices taking places before first choices, capacity computed over all tokens
    instead of per rank, a token sent to the wrong rank, or gates not renormalised over the top k."""
    torch.manual_seed(1)
    moe = MoE(MoEConfig(hidden=20, ffn=36, experts=6, top_k=2, capacity_factor=cf))
    x = zipf_tokens(90, 50, 20, seed=3)
    want, want_dropped, remote = naive_moe(moe, x, 3)
    out, info = expert_parallel_forward(moe, x, 3)
    assert (out.double() - want).abs().max() < 1e-5
    assert (moe(x, groups=3).double() - want).abs().max() < 1e-5
    route = info["route"]
    assert 1 - route["kept"].double().mean().item() == pytest.approx(want_dropped, abs=1e-12)
    assert dropped_fraction(route["loads"], route["capacity"]) == pytest.approx(want_dropped, abs=1e-12)
    assert sum(info["dispatch_bytes"]) == remote * 20 * 4
    assert info["dispatch_bytes"] == info["combine_bytes"]
    if cf == 4.0:
        assert want_dropped == 0


def test_padded_buffers_are_capacity_sized():
    """Static-shape all-to-all (GShard): each rank sends C slots per remote expert whatever is used."""
    moe = MoE(MoEConfig(hidden=8, ffn=8, experts=4, top_k=1, capacity_factor=1.5))
    _, info = expert_parallel_forward(moe, torch.randn(40, 8), 2)
    assert info["route"]["capacity"] == math.ceil(1.5 * 20 * 1 / 4)
    assert info["padded_bytes"] == 1 * 2 * 8 * 8 * 4


def test_zipf_inputs_are_more_imbalanced_than_gaussian():
    """Frequent token ids route identically: the busiest expert's load over the mean grows."""
    torch.manual_seed(0)
    moe = MoE(MoEConfig())
    zipf = moe.route(zipf_tokens(4096, 2000, 64), 1)["loads"].float()
    gauss = moe.route(torch.randn(4096, 64, generator=torch.Generator().manual_seed(0)), 1)["loads"].float()
    assert zipf.max() / zipf.mean() > gauss.max() / gauss.mean()


def test_bad_configs():
    with pytest.raises(ValueError, match="top_k"):
        MoEConfig(experts=2, top_k=3)
    with pytest.raises(ValueError, match="capacity_factor"):
        MoEConfig(capacity_factor=0)
    with pytest.raises(ValueError, match="divisible"):
        expert_parallel_forward(MoE(MoEConfig(experts=6)), torch.randn(40, 64), 4)
