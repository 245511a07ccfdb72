"""The per-stack byte counts the planner prices memory-bound kernels with (distlab.gpu.block_bytes), against the
op-by-op count of the frameworks' own blocks (distlab.gpu.kernel_bytes) and against layers worked by hand.

The counts are bit-exact: bytes are integers, and the closed forms must reproduce every op the count sees."""

import pytest

from distlab.gpu import block_bytes
from distlab.gpu.block_bytes import LayerSpec, layer_bytes, loss_bytes_per_logit


def test_fused_gpt_layer_by_hand():
    """Megatron's fused GPT layer at h = 4, f = 16, 3 tokens, no dropout, flash attention, bf16: forward two
    LayerNorms (read 2 + write 2 bytes per element and 8 bytes of fp32 mean and rstd per row), two bias + dropout +
    adds (read 2 + 2, write 2), bias + GeLU (read 2 + write 2 per MLP element); backward the norms read dy and x and
    write dx (6) and re-read the statistics, two residual joins (6), GeLU's backward (6 per MLP element), the bias
    row-sums (2 per output element: 3h q, k, v + f + 2h) and the q, k, v split's concatenation (2 + 2 per element of
    3h). Would catch a kernel counted twice, a dtype's bytes wrong, or backward taken as twice the forward."""
    T, h, f = 3, 4, 16
    s = LayerSpec(tokens=T, seq=T, hidden=h, ffn=f, heads=2, kv_heads=2)
    forward = 2 * (4 * T * h + 8 * T) + 2 * 6 * T * h + 4 * T * f
    backward = 2 * (6 * T * h + 8 * T) + 2 * 6 * T * h + 6 * T * f + 2 * (T * 3 * h + T * f + 2 * T * h) + 4 * T * 3 * h
    assert layer_bytes("fused", s) == (forward, backward)


def test_fused_layer_with_dropout_sequence_parallel_and_tp_by_hand():
    """The same layer with dropout, TP 2 and sequence parallelism: the residual stream's kernels (norms, bias +
    dropout + add, joins) see T/2 rows, the MLP and q, k, v kernels T rows of half width; dropout writes a one-byte
    mask forward and reads it backward. Would catch sequence parallelism splitting the wrong tensors."""
    T, h, f, t = 8, 4, 16, 2
    s = LayerSpec(tokens=T, seq=T, hidden=h, ffn=f, heads=2, kv_heads=2, tp=t, sequence_parallel=True, dropout=True)
    r = T // t
    forward = 2 * (4 * r * h + 8 * r) + 2 * 7 * r * h + 4 * T * f / t
    backward = (
        2 * (6 * r * h + 8 * r)  # norms
        + 2 * 5 * r * h  # dropout's backward: read grad and mask, write
        + 2 * 6 * r * h  # residual joins
        + 6 * T * f / t  # GeLU backward
        + 2 * (T * 3 * h / t + T * f / t + 2 * r * h)  # bias row sums
        + 4 * T * 3 * h / t  # the split's concatenation
    )
    assert layer_bytes("fused", s) == pytest.approx((forward, backward), rel=1e-12)


def test_llm_foundry_layer_by_hand():
    """LLM Foundry's eager MPT layer moves what the fused one does plus FlashAttention's varlen copies: three gathers
    of q, k, v (read 2 + write 2 per element and 8 bytes of row index each) and a zero-filled output put back (zeros
    2, read 2, write 2, index 8), and in backward the three scatters into zeros (zeros 2, read 2, write 2, index 8)
    and a gather (read 2, write 2, index 8); its LayerNorm and bias kernels also read the small weights (a per-call
    term). At h = 4, f = 16, 3 tokens: would catch a copy left out of the closed form."""
    T, h, f = 3, 4, 16
    s = LayerSpec(tokens=T, seq=T, hidden=h, ffn=f, heads=2, kv_heads=2)
    fused_f, fused_b = layer_bytes("fused", s)
    eager_f, eager_b = layer_bytes("llm-foundry", s)
    weights_f = 2 * 4 * h  # two norms read weight and bias
    weights_b = 2 * 8 * h + 2 * (3 * h + h + f + h)  # norms read w, b and write their grads; bias grads written
    assert eager_f - fused_f == 3 * (4 * T * h + 8 * T) + (6 * T * h + 8 * T) + weights_f
    assert eager_b - fused_b == 3 * (6 * T * h + 8 * T) + (4 * T * h + 8 * T) + weights_b


@pytest.mark.parametrize("stack", ["llm-foundry", "torchtitan"])
def test_counted_blocks_equal_the_formulas(stack):
    """The frameworks' blocks, run forward and backward in bf16 under the dispatch counter, move exactly what the
    closed forms say, at two awkward shapes each (GQA groups of 3, widths not powers of two, odd token counts).
    Would catch any op the formula misses or counts twice (an autograd join, a cast, a layout copy)."""
    from distlab.gpu.kernel_bytes import BLOCK, CPU_STAT_BYTES, SHAPES, count_block, spec

    for sh in SHAPES[stack]:
        counted = count_block(BLOCK[stack], sh, (sh["batch"], sh["seq"]))
        tokens = sh["batch"] * sh["seq"]
        stat = CPU_STAT_BYTES if stack == "llm-foundry" else block_bytes.CUDA_STAT_BYTES
        f, b = layer_bytes(stack, spec(stack, sh, stat))
        assert counted["forward"] * tokens == pytest.approx(f, abs=1e-6)
        assert counted["backward"] * tokens == pytest.approx(b, abs=1e-6)


@pytest.mark.parametrize("kind", ["torch-fp32", "megatron-fp32"])
def test_counted_losses_equal_the_formulas(kind):
    """Cross-entropy over bf16 logits cast to fp32, as torchtitan (F.cross_entropy) and Megatron (the vocab-parallel
    kernel's max, subtract, exp, sum, divide) run it: per logit, to within the per-row terms (a few values per row of
    4,000 logits). Would catch a pass over the logits left out."""
    from distlab.gpu.kernel_bytes import count_loss

    f, b = count_loss(kind, 4000, 5)
    assert (f, b) == pytest.approx(loss_bytes_per_logit(kind), abs=128 / 4000)


def test_counting_rules_on_single_ops():
    """The counter's rule, op by op: an add reads both inputs and writes one; a gather reads only what it gathers (and
    its broadcast index once); exp(out=) does not read its destination; index_put_ writes only where its values land;
    a view moves nothing. Would catch a rule that charges a whole tensor for an indexed read."""
    import torch

    from distlab.gpu.kernel_bytes import counter

    x = torch.zeros(10, 6)
    idx = torch.tensor([1, 3])
    out = torch.empty(10, 6)
    ones = torch.ones(2, 6)
    for fn, expected in (
        (lambda: x + x, 3 * 240),
        (lambda: torch.gather(x, 0, idx[:, None].expand(-1, 6)), 48 + 16 + 48),
        (lambda: torch.exp(x, out=out), 240 + 240),
        (lambda: x.clone().index_put_((idx,), ones), 2 * 240 + (16 + 48 + 48)),
        (lambda: x.view(6, 10).t(), 0),
    ):
        c = counter()
        with c:
            fn()
        assert c.total("forward") == expected


def test_eager_stacks_refuse_blocks_they_were_not_counted_for():
    """The eager closed forms are the counted blocks': asked for another architecture they say so instead of
    guessing. Would catch the planner pricing a SwiGLU layer with MPT's kernel list."""
    s = LayerSpec(tokens=4, seq=4, hidden=8, ffn=16, heads=2, kv_heads=2, mlp="swiglu", norm="rmsnorm", rope=True)
    with pytest.raises(ValueError, match="MPT"):
        layer_bytes("llm-foundry", s)
    with pytest.raises(ValueError, match="kernels must be one of"):
        layer_bytes("tensorflow", s)


def test_the_fused_layers_worked_by_hand_catch_a_forgotten_kernel(monkeypatch):
    """The claim every planner page carries (block_bytes_checks): it holds as written, and a fused stack that forgets
    one kernel (the q, k, v split's concatenation) fails it by that kernel's bytes."""
    from distlab.core.results import Result
    from distlab.gpu.block_bytes_checks import fused_layer_by_hand

    r = Result("fused", "cpu")
    fused_layer_by_hand(r)
    assert len(r.claims) == 1 and r.claims[0].passed
    real = block_bytes.fused_kernels
    monkeypatch.setitem(block_bytes.KERNELS, "fused", lambda s: [k for k in real(s) if "split" not in k.name])
    r = Result("fused", "cpu")
    fused_layer_by_hand(r)
    assert not r.claims[0].passed
    assert r.claims[0].measured == 4 * 5 * 3 * 6  # the GPT layers' concatenation: 2 + 2 B x 5 tokens x 3h, h = 6
