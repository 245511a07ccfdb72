"""The architecture-exact closed forms (distlab.memory.layer_activations) against independent references:
Korthikanti et al.'s Table 2 rows for the GPT block, hand-collected expressions for Llama and MoE layers, the
splits tensor and sequence parallelism must make, and the counted blocks themselves (the experiment)."""

from fractions import Fraction

import pytest

from distlab.memory.activation_memory_models import activation_memory_models
from distlab.memory.activations import (
    activation_bytes_per_layer,
    logits_bytes,
    model_activation_bytes,
    model_activation_bytes_per_layer,
)
from distlab.memory.layer_activations import (
    formula,
    gpt_block,
    layer_bytes,
    moe_slots,
    output_terms,
    saved_tensors,
)
from distlab.models.shapes import BlockShape, ModelShape, named, preset

SHAPES = [(2048, 1, 12288, 96), (4096, 8, 4096, 32), (96, 3, 60, 5), (1000, 2, 120, 8)]


@pytest.mark.parametrize(("s", "b", "h", "a"), SHAPES)
@pytest.mark.parametrize("t", [1, 2, 4])
def test_gpt_block_is_table_2_plus_the_norm_statistics(s, b, h, a, t):
    """Every Table 2 row (Korthikanti et al.), plus the 16sb of fp32 LayerNorm statistics the paper leaves out
    (divided by t only with sequence parallelism). Would catch a term counted twice or a wrong /t."""
    if a % t or (s % t):
        pytest.skip("heads or sequence do not divide by t")
    block = gpt_block(h, a)
    for sp in (False, True):
        stats = 16 * s * b // (t if sp else 1)
        for rc in ("none", "selective"):
            paper = activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=sp, recompute=rc)
            ours = layer_bytes(block, s, b, attention="eager", recompute=rc, tp=t, sequence_parallel=sp)
            assert ours == pytest.approx(paper + stats, rel=1e-12)
        full = layer_bytes(block, s, b, attention="eager", recompute="full", tp=t, sequence_parallel=sp)
        assert full == activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=sp, recompute="full")


def test_llama_70b_by_hand():
    """Llama 2 70B at s = 4096, b = 2, written out: eager 16sbh + 2as²b + 8sbf + 8sb; flash
    12sbh + 4sbh·g/a + 8sbf + 4abs + 8sb; selective the flash one without the log-sum-exp."""
    m, s, b = preset("70B"), 4096, 2
    h, a, g, f, sb = 8192, 64, 8, 28672, 4096 * 2
    sbh = sb * h
    assert (
        model_activation_bytes_per_layer(m, s, b, attention="eager")
        == 16 * sbh + 2 * a * s * s * b + 8 * sb * f + 8 * sb
    )
    flash = 12 * sbh + 4 * sbh * g // a + 8 * sb * f + 4 * a * b * s + 8 * sb
    assert model_activation_bytes_per_layer(m, s, b) == flash
    assert (
        model_activation_bytes_per_layer(m, s, b, attention="standard", recompute="selective") == flash - 4 * a * b * s
    )
    assert model_activation_bytes_per_layer(m, s, b, recompute="full") == 2 * sbh
    assert model_activation_bytes(m, s, b) == 80 * flash


@pytest.mark.parametrize("key", ["7B", "70B", "Llama-3-8B", "Llama-3-405B"])
def test_sequence_parallel_divides_everything_while_t_divides_the_kv_heads(key):
    """With t a divisor of g (and of s), tensor + sequence parallelism splits every tensor t ways; with
    t > g one KV head per rank is a replica, and the excess over A/t is exactly the replicated K and V."""
    m, s = named(key), 4096
    one = model_activation_bytes_per_layer(m, s, 1)
    for t in (2, 4, 8):
        assert model_activation_bytes_per_layer(m, s, 1, tp=t, sequence_parallel=True) == one // t
    t, d, g = 16, m.head_dim, m.kv
    if g < t and m.heads % t == 0:
        sp = model_activation_bytes_per_layer(m, s, 1, tp=t, sequence_parallel=True)
        assert sp - one / t == pytest.approx(2 * 2 * s * d - 2 * 2 * s * d * g / t, rel=1e-12)


def test_moe_layer_by_hand_and_capacity():
    """Mixtral 8x7B at s = 1000, b = 3: N = sbk slots dropless; with cf = 1.25 every expert is padded to
    ⌈cf·sbk/E⌉. Would catch the experts sized as one MLP, or the capacity computed per expert the wrong way."""
    m, s, b = named("Mixtral-8x7B"), 1000, 3
    h, a, g, f, k, e, sb = 4096, 32, 8, 14336, 2, 8, 3000
    attention = 12 * sb * h + 4 * sb * h * g // a + 4 * a * b * s + 8 * sb
    n = sb * k
    per_slot = 18 + 4 * h + 8 * f
    assert model_activation_bytes_per_layer(m, s, b) == attention + 12 * sb * k + n * per_slot
    slots = e * -(-(5 * sb * k) // (4 * e))  # ⌈1.25 · 6000 / 8⌉ = 938 per expert
    assert moe_slots(sb, e, k, 1.25) == slots == 7504
    assert model_activation_bytes_per_layer(m, s, b, capacity_factor=1.25) == attention + 12 * sb * k + slots * per_slot


def test_moe_with_dense_layers_sums_each_kind():
    """A DeepSeek-like stack (first layers dense): the total sums each kind of layer; per layer is the heavier.
    Would catch the total taken as L × one kind."""
    m = ModelShape(
        layers=6, hidden=64, heads=4, kv_heads=2, ffn=512, vocab=10, experts=8, top_k=2, moe_ffn=32, dense_layers=2
    )
    dense, moe = (layer_bytes(m.block(moe=x), 97, 1) for x in (False, True))
    assert dense != moe
    assert model_activation_bytes(m, 97, 1) == 2 * dense + 4 * moe
    assert model_activation_bytes_per_layer(m, 97, 1) == max(dense, moe)


def test_logits_at_a_128k_vocabulary():
    """Llama 3 8B, s = 8192: 4sbV of fp32 log-probabilities dominate the head and the loss, and the vocabulary
    splits t ways with TP. Would catch 16-bit logits counted, or the whole vocabulary on every TP rank."""
    m, s = named("Llama-3-8B"), 8192
    small = 2 * 2 * s * m.hidden + 4 * s + 8 * s + 4
    assert logits_bytes(m, s, 1) == 4 * s * m.vocab + small
    assert logits_bytes(m, s, 1, tp=8) == 4 * s * m.vocab // 8 + small
    assert [t.module for t in output_terms(64, 10, 3, 1)] == ["norm", "norm", "head", "loss", "loss", "loss"]


def test_formula_collects_like_terms():
    block = BlockShape(hidden=64, heads=4, kv_heads=2, ffn=96)
    assert formula(saved_tensors(block, 8, 1)) == "12sbh + 8sb + 4sbh·g/a + 4abs + 8sbf"
    assert formula(saved_tensors(gpt_block(64, 4), 8, 1, attention="eager")) == "18sbh + 16sb + 5as²b + 4sbf"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"recompute": "some"}, "recompute"),
        ({"attention": "ring"}, "attention"),
        ({"tp": 3}, "divisible by TP"),
        ({"tp": 2, "sequence_parallel": True, "s": 7}, "sequence"),
        ({"s": 0}, "seq"),
    ],
)
def test_bad_inputs(kw, message):
    block = BlockShape(hidden=64, heads=4, kv_heads=2, ffn=96)
    s = kw.pop("s", 8)
    with pytest.raises(ValueError, match=message):
        saved_tensors(block, s, 1, **kw)


def test_the_counted_blocks_match_the_closed_forms():
    """The experiment: every configuration counted with saved-tensor hooks equals its closed form, in order."""
    r = activation_memory_models("cpu")
    assert not r.failed_claims, [c.describe() for c in r.failed_claims]
    assert r.quantities["configs"].value >= 20


def test_latent_attention_by_hand_at_deepseek_v3_widths():
    """DeepSeek-V3's MLA widths (its config: 128 heads, r_q 1536, r_kv 512, d_n 128, d_r 64, d_v 128), eager, at
    s = 1024: 8sbh + 16sb + 4sb·r_q + 2sb(r_kv + d_r) + 2sb·r_kv + 4sba(d_n + d_r) + 4sba·d_v + 2as²b + 8sbf,
    with an MLP of width 2048. Would catch the rotary key counted per head, or a latent left out."""
    from distlab.core.facts import entries

    c = entries("moe_models")["DeepSeek-V3"]
    a, rq, rkv, dn, dr, dv, h = (c[k] for k in ("heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                 "qk_rope_head_dim", "v_head_dim", "hidden"))  # fmt: skip
    block = BlockShape(hidden=h, heads=a, kv_heads=a, ffn=2048, q_lora_rank=rq, kv_lora_rank=rkv,
                       qk_nope_head_dim=dn, qk_rope_head_dim=dr, v_head_dim=dv)  # fmt: skip
    s, f = 1024, 2048
    by_hand = (8 * s * h + 16 * s + 4 * s * rq + 2 * s * (rkv + dr) + 2 * s * rkv + 4 * s * a * (dn + dr)
               + 4 * s * a * dv + 2 * a * s * s + 8 * s * f)  # fmt: skip
    assert layer_bytes(block, s, 1, attention="eager") == by_hand
    with pytest.raises(ValueError, match="eager"):
        layer_bytes(block, s, 1, attention="flash")


def test_a_printed_closed_form_reads_back_by_hand():
    """The reader of the counted table's closed forms (the claim that guards the printed text): a square taken of the
    whole term instead of s, a "/t" dividing the whole sum, or a parenthesis dropped would each miss these by hand."""
    from distlab.memory.activation_memory_models import evaluate_notation

    z = {"s": 7, "b": 3, "h": 10, "a": 5, "t": 2, "g": 1, "d_n": 4, "d_r": 6}
    assert evaluate_notation("5as²b", z) == 5 * 5 * 49 * 3
    assert evaluate_notation("4sbh·g/a/t + 2", z) == Fraction(4 * 7 * 3 * 10 * 1, 5 * 2) + 2
    assert evaluate_notation("4sba(d_n + d_r)/t", z) == 4 * 7 * 3 * 5 * (4 + 6) // 2
    assert evaluate_notation("sbh", z) == 7 * 3 * 10
    with pytest.raises(ValueError, match="unreadable"):
        evaluate_notation("4sbx", z)
