"""Parameter counts of published models against their published totals."""

import json

import pytest

from distlab.models.shapes import ModelShape, catalog, from_json, named, preset, presets, published_params


@pytest.mark.parametrize(
    ("name", "published", "rel"),
    [
        ("7B", 6_738_415_616, 0),  # Llama 2 7B, exact from the released checkpoint
        ("13B", 13_015_864_320, 0),  # Llama 2 13B, exact from the released checkpoint
        ("70B", 68_976_648_192, 0),  # Llama 2 70B, exact from the released checkpoint
        ("175B", 175e9, 0.01),  # GPT-3, "175B" in Table 2.1
        ("1B", 1_235_814_400, 0),  # Llama 3.2 1B, exact (tied embeddings)
    ],
)
def test_preset_param_counts(name, published, rel):
    assert preset(name).params() == pytest.approx(published, rel=rel, abs=0)


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("Llama-3-8B", 8_030_261_248),  # meta-llama/Llama-3.1-8B, safetensors total (Meta-Llama-3-8B: the same)
        ("Llama-3-70B", 70_553_706_496),
        ("Llama-3-405B", 405_853_388_800),
        ("Mixtral-8x7B", 46_702_792_704),  # mistralai/Mixtral-8x7B-v0.1, safetensors total
    ],
)
def test_llama3_and_mixtral_counts_are_the_checkpoints(name, published):
    """Exact against the released checkpoints, typed here independently of the data files (which hold them
    for the page's claims). Would catch a shape typo, GQA's narrower K/V ignored, or experts counted once."""
    assert named(name).params() == published
    assert published_params(name) == published


def test_mixtral_active_parameters_and_the_catalog():
    """Mixtral: 2 of 8 experts per token, 12.88B active (the paper's "13B"); DeepSeek-V3 (MLA, shared experts)
    is left out of the catalog rather than counted wrongly; the chapters' presets are unchanged."""
    m = named("Mixtral-8x7B")
    expert = 3 * 4096 * 14336
    assert m.active_params() == m.params() - 32 * 6 * expert
    assert round(m.active_params() / 1e9) == 13 and round(m.params() / 1e9) == 47
    assert "DeepSeek-V3" not in catalog() and set(presets()) == {"1B", "7B", "13B", "70B", "175B"}
    assert set(presets()) < set(catalog())


def test_family_defaults_and_overrides():
    """Llama family: RMSNorm, RoPE, no dropout; GPT family: LayerNorm, learned positions, dropout. A LayerNorm
    override on a SwiGLU model adds one bias per norm (2 per layer and the final one). Would catch a default
    that follows the wrong family, or a norm override that leaves the count unchanged."""
    llama, gpt = preset("7B"), preset("175B")
    assert (llama.norm_kind, llama.rope, llama.trains_with_dropout) == ("rmsnorm", True, False)
    assert (gpt.norm_kind, gpt.rope, gpt.trains_with_dropout) == ("layernorm", False, True)
    ln = ModelShape(layers=3, hidden=64, heads=4, ffn=96, vocab=10, norm="layernorm")
    rms = ModelShape(layers=3, hidden=64, heads=4, ffn=96, vocab=10)
    assert ln.params() - rms.params() == (3 * 2 + 1) * 64
    block = named("Mixtral-8x7B").block()
    assert (block.experts, block.top_k, block.ffn, block.kv_heads) == (8, 2, 14336, 8)


def test_bad_shapes_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="divisible"):
        ModelShape(layers=2, hidden=100, heads=3, ffn=10, vocab=10)
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"layers": 2, "hidden": 64, "heads": 4, "ffn": 10, "vocab": 10, "color": 1}))
    with pytest.raises(ValueError, match="unknown keys"):
        from_json(bad)
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("3B")
    with pytest.raises(ValueError, match="top_k"):
        ModelShape(layers=2, hidden=64, heads=4, ffn=10, vocab=10, experts=4, top_k=5)
    with pytest.raises(ValueError, match="swiglu"):
        ModelShape(layers=2, hidden=64, heads=4, ffn=10, vocab=10, experts=4, top_k=2, mlp="gelu")
    with pytest.raises(ValueError, match="unknown model"):
        named("DeepSeek-V3")
