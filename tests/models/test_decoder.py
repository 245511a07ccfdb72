"""The counted blocks compute what they claim to: fused-style norms against float64 autograd (gradcheck), RoPE
against its defining property, eager and SDPA attention against each other, the MoE against a per-token loop,
a tensor-parallel rank's shard against the full layer, and parameter counts against ModelShape's closed form.

Bit-exact: nothing here (different kernels and summation orders); the tolerances are stated per test.
"""

import math

import pytest
import torch
from torch.nn import functional as F

from distlab.models.decoder import Attention, AttentionCore, DecoderBlock, local_kv_heads
from distlab.models.layers import MLP, LayerNorm, RMSNorm, RoPE
from distlab.models.moe import MoE, capacity
from distlab.models.shapes import BlockShape, ModelShape

F64 = torch.float64


@pytest.mark.parametrize("kind", [RMSNorm, LayerNorm])
def test_fused_norms_backward_is_the_derivative(kind):
    """gradcheck in float64 (finite differences against the hand-written backward), width 37, 3 x 5 rows.
    Would catch a wrong term in the recomputed backward (the mean of gx·x̂, LayerNorm's mean of gx)."""
    torch.manual_seed(0)
    mod = kind(37).to(F64)
    with torch.no_grad():
        mod.weight.uniform_(0.5, 1.5)
        if hasattr(mod, "bias"):
            mod.bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, 5, 37, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *p: mod(x), (x, *mod.parameters()), eps=1e-6, atol=1e-8)


def test_fused_norms_forward_match_torch():
    """Against torch's own LayerNorm and the RMSNorm formula in float64, to 1e-12."""
    torch.manual_seed(1)
    x = torch.randn(4, 7, 24, dtype=F64)
    ln = LayerNorm(24).to(F64)
    assert torch.allclose(ln(x), F.layer_norm(x, (24,), eps=1e-5), atol=1e-12, rtol=0)
    rms = RMSNorm(24).to(F64)
    assert torch.allclose(rms(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5), atol=1e-12, rtol=0)


def test_rope_scores_depend_only_on_the_offset():
    """<RoPE(q) at m, RoPE(k) at n> is a function of m − n (Su et al.'s defining property), and rotation keeps
    norms. Would catch cos and sin swapped or the halves rotated the wrong way."""
    torch.manual_seed(2)
    rope = RoPE(16, 64).to(F64)
    q, k = torch.randn(16, dtype=F64), torch.randn(16, dtype=F64)
    seq = lambda v: v.expand(1, 64, 1, 16).clone()  # the same vector at every position
    rq, rk = rope(seq(q))[0, :, 0], rope(seq(k))[0, :, 0]
    assert torch.allclose(rq.norm(dim=-1), q.norm().expand(64), atol=1e-12)
    dots = rq @ rk.T  # (m, n)
    for offset in (0, 3, 17):
        diag = torch.diagonal(dots, offset=-offset)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-10), offset


@pytest.mark.parametrize(("heads", "kv"), [(6, 6), (6, 2), (4, 1)])
def test_eager_and_sdpa_attention_agree(heads, kv):
    """The written-out core (K, V repeated for GQA) and the fused kernel (enable_gqa) on the same inputs, fp32,
    sequence 37: outputs within 1e-5 of a float64 loop, input gradients within 5e-6 of their largest magnitude of
    each other (fp32 sums in different orders). Would catch a mask off by one or a wrong head grouping."""
    torch.manual_seed(3)
    b, s, d = 2, 37, 8
    q = torch.randn(b, s, heads, d, requires_grad=True)
    k = torch.randn(b, s, kv, d, requires_grad=True)
    v = torch.randn(b, s, kv, d, requires_grad=True)
    outs, grads = [], []
    for kind in ("eager", "sdpa"):
        core = AttentionCore(heads, kv, kind=kind, dropout=0.0, max_seq=s)
        y = core(q, k, v)
        g = torch.autograd.grad(y.square().sum(), (q, k, v))
        outs.append(y)
        grads.append(g)
    # float64 reference, written independently: causal softmax per head, head i reads KV group i // (a / g)
    qd, kd, vd = (t.detach().double() for t in (q, k, v))
    ref = torch.empty(b, s, heads, d, dtype=F64)
    for i in range(heads):
        j = i // (heads // kv)
        scores = qd[:, :, i] @ kd[:, :, j].transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        ref[:, :, i] = scores.softmax(-1) @ vd[:, :, j]
    for y in outs:
        assert torch.allclose(y.double(), ref, atol=1e-5, rtol=0)
    for ge, gs in zip(*grads):
        assert (ge - gs).abs().max() <= 5e-6 * gs.abs().max()


def _naive_moe(moe: MoE, x: torch.Tensor, cap: int | None) -> torch.Tensor:
    """Token by token, in priority order (all first choices, then second ones), an expert full at `cap` slots
    takes no more."""
    xt = x.reshape(-1, x.shape[-1])
    logits = moe.router(xt)
    top, choice = logits.topk(moe.top_k, dim=-1)
    gates = F.softmax(top.double(), dim=-1)
    out = torch.zeros_like(xt, dtype=F64)
    taken = [0] * moe.experts_n
    for j in range(moe.top_k):
        for t in range(xt.shape[0]):
            e = int(choice[t, j])
            if cap is not None and taken[e] >= cap:
                continue
            taken[e] += 1
            out[t] += gates[t, j] * moe.experts[e](xt[t : t + 1]).double()[0]
    return out.view(x.shape)


@pytest.mark.parametrize("cf", [None, 1.0, 0.5])
def test_moe_matches_a_token_by_token_loop(cf):
    """Dropless and capacity-limited routing, fp32, 8 experts, top-2, 29 tokens: output within 1e-5 of the
    loop. Would catch a slot given to the wrong token, a dropped first choice, or padding that adds something."""
    torch.manual_seed(4)
    shape = BlockShape(hidden=16, heads=2, kv_heads=2, ffn=12, experts=8, top_k=2)
    moe = MoE(shape, capacity_factor=cf)
    x = torch.randn(1, 29, 16)
    cap = None if cf is None else capacity(29, 8, 2, cf)
    y = moe(x)
    assert torch.allclose(y.double(), _naive_moe(moe, x, cap), atol=1e-5, rtol=0)
    assert sum(moe.loads) == (29 * 2 if cf is None else 8 * cap)


@pytest.mark.parametrize(("kv", "tp"), [(6, 3), (2, 2), (2, 6)])
def test_a_tensor_parallel_rank_holds_its_shard_of_the_layer(kv, tp):
    """The t ranks' attention outputs (each its heads, its KV heads or a replica when t > g, its columns of the
    output projection) and MLP outputs sum to the full layer's, fp64 to 1e-10. Would catch a rank built with
    the wrong widths, which would make the counted per-rank bytes meaningless."""
    torch.manual_seed(5)
    shape = BlockShape(hidden=48, heads=6, kv_heads=kv, ffn=36)
    full = Attention(shape, attention="eager", dropout=0.0, tp=1, max_seq=11).to(F64)
    x = torch.randn(2, 11, 48, dtype=F64)
    d, a_r, g_r = 8, 6 // tp, local_kv_heads(kv, tp)
    total = torch.zeros(2, 11, 48, dtype=F64)
    for r in range(tp):
        part = Attention(shape, attention="eager", dropout=0.0, tp=tp, max_seq=11).to(F64)
        heads = slice(r * a_r * d, (r + 1) * a_r * d)
        g0 = (r * a_r) // (6 // kv)  # the KV head of this rank's first query head
        kvs = slice(g0 * d, (g0 + g_r) * d)
        with torch.no_grad():
            part.q_proj.weight.copy_(full.q_proj.weight[heads])
            part.k_proj.weight.copy_(full.k_proj.weight[kvs])
            part.v_proj.weight.copy_(full.v_proj.weight[kvs])
            part.o_proj.weight.copy_(full.o_proj.weight[:, heads])
        total += part(x)
    assert torch.allclose(total, full(x), atol=1e-10, rtol=0)
    mlp = MLP(48, 36, kind="swiglu").to(F64)
    parts = torch.zeros(2, 11, 48, dtype=F64)
    w = 36 // tp
    for r in range(tp):
        p = MLP(48, w, kind="swiglu").to(F64)
        cols = slice(r * w, (r + 1) * w)
        with torch.no_grad():
            p.gate.weight.copy_(mlp.gate.weight[cols])
            p.up.weight.copy_(mlp.up.weight[cols])
            p.down.weight.copy_(mlp.down.weight[:, cols])
        parts += p(x)
    assert torch.allclose(parts, mlp(x), atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "model",
    [
        ModelShape(layers=1, hidden=96, heads=6, kv_heads=2, ffn=168, vocab=10),  # Llama-style
        ModelShape(layers=1, hidden=96, heads=4, ffn=384, vocab=10, mlp="gelu"),  # GPT-style, biases
        ModelShape(layers=1, hidden=64, heads=4, kv_heads=2, ffn=40, vocab=10, experts=8, top_k=2),  # MoE
    ],
)
def test_block_parameters_equal_the_shapes_count(model):
    """The torch block's parameters against ModelShape.params_per_layer (an independent closed form). Would
    catch a block with a missing bias, a norm with the wrong parameters or experts of the wrong width."""
    blk = DecoderBlock(model.block(), attention="sdpa", max_seq=8)
    assert sum(p.numel() for p in blk.parameters()) == model.params_per_layer(moe=bool(model.experts))


def test_bad_block_configurations_are_refused():
    shape = BlockShape(hidden=48, heads=6, kv_heads=2, ffn=36)
    with pytest.raises(ValueError, match="divide one another"):
        DecoderBlock(shape, tp=3)
    with pytest.raises(ValueError, match="divisible by TP"):
        DecoderBlock(BlockShape(hidden=48, heads=6, kv_heads=6, ffn=35), tp=2)
    with pytest.raises(ValueError, match="attention must be"):
        DecoderBlock(shape, attention="ring")
    with pytest.raises(ValueError, match="top_k"):
        BlockShape(hidden=48, heads=6, kv_heads=2, ffn=36, experts=4, top_k=5)


def test_latent_attention_matches_a_float64_reimplementation():
    """MLA (DeepSeek-V2 Section 2.1) written out independently in float64: latents, their RMSNorms, per-head
    decompression, a rotary key shared by every head, causal softmax. Would catch the rotary key rotated per
    head, the latent norm skipped, or k and v split the wrong way (errors of order 1; the tolerance is the fp32
    rotary tables')."""
    from distlab.models.decoder import LatentAttention

    torch.manual_seed(6)
    shape = BlockShape(hidden=32, heads=2, kv_heads=2, ffn=8, q_lora_rank=12, kv_lora_rank=10, qk_nope_head_dim=6,
                       qk_rope_head_dim=4, v_head_dim=5)  # fmt: skip
    att = LatentAttention(shape, attention="eager", dropout=0.0, tp=1, max_seq=9).to(F64)
    x = torch.randn(2, 9, 32, dtype=F64)
    b, s, a, dn, dr, dv = 2, 9, 2, 6, 4, 5
    rms = lambda t: t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5)
    pos = torch.arange(s, dtype=F64)[:, None] / 10000.0 ** (torch.arange(0, dr, 2, dtype=F64) / dr)[None, :]
    cos, sin = torch.cat([pos, pos], -1).cos(), torch.cat([pos, pos], -1).sin()  # (S, dr)

    def rotate(t):  # (B, S, heads, dr)
        half = t.shape[-1] // 2
        return t * cos[:, None] + torch.cat([-t[..., half:], t[..., :half]], -1) * sin[:, None]

    q = (rms(x @ att.q_a.weight.T) @ att.q_b.weight.T).view(b, s, a, dn + dr)
    q = torch.cat([q[..., :dn], rotate(q[..., dn:])], -1)
    kv_a = x @ att.kv_a.weight.T
    kv = (rms(kv_a[..., :10]) @ att.kv_b.weight.T).view(b, s, a, dn + dv)
    k = torch.cat([kv[..., :dn], rotate(kv_a[..., None, 10:]).expand(b, s, a, dr)], -1)
    v = kv[..., dn:]
    scores = torch.einsum("bsad,btad->bast", q, k) / math.sqrt(dn + dr)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.einsum("bast,btad->bsad", scores.softmax(-1), v).reshape(b, s, a * dv) @ att.o_proj.weight.T
    assert torch.allclose(att(x), y, atol=1e-6, rtol=0)  # the RoPE tables are built in fp32, as the model's
    with pytest.raises(ValueError, match="eager"):
        LatentAttention(shape, attention="sdpa", dropout=0.0, tp=1, max_seq=9)
