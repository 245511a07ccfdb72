"""adamw-bytes against an independent count: closed-form parameter counts times bytes per dtype."""

import pytest

from distlab.memory.adamw_bytes import measure_fp32, measure_mixed
from distlab.memory.model_states import model_state_bytes
from distlab.models.gpt import GPT, GPTConfig, param_count
from distlab.models.shapes import preset

# Awkward shapes on purpose: untied head, ffn not 4h, odd vocab.
CONFIGS = [GPTConfig(), GPTConfig(vocab=97, seq=17, layers=3, hidden=24, heads=3, ffn=50, tie_embeddings=False)]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_param_count_closed_form(cfg):
    """Would catch a closed form that forgets biases, norms or double-counts the tied embedding."""
    assert sum(p.numel() for p in GPT(cfg).parameters()) == param_count(cfg)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_mixed_precision_bytes_per_category(cfg):
    n = param_count(cfg)
    counts = measure_mixed(cfg)
    assert counts["weights (bf16)"] == 2 * n
    assert counts["gradients (bf16)"] == 2 * n
    assert counts["master weights (fp32)"] == 4 * n
    assert counts["Adam m (fp32)"] == 4 * n
    assert counts["Adam v (fp32)"] == 4 * n
    tensors = cfg.layers * 12 + 2 + 2 + (0 if cfg.tie_embeddings else 1)
    assert counts["tensors"] == tensors
    assert counts["step counters"] == 4 * tensors
    assert counts["transient fp32 gradients"] == 4 * n


def test_fp32_bytes_per_category():
    cfg = CONFIGS[1]
    n = param_count(cfg)
    counts = measure_fp32(cfg)
    assert [counts[k] for k in ("weights (fp32)", "gradients (fp32)", "Adam m (fp32)", "Adam v (fp32)")] == [4 * n] * 4


def test_seven_b_states():
    """Llama 2 7B has 6,738,415,616 parameters (the published config); 16 B each."""
    n = preset("7B").params()
    assert n == 6_738_415_616
    assert sum(model_state_bytes(n).values()) == 16 * 6_738_415_616


def test_unknown_precision():
    with pytest.raises(ValueError, match="precision"):
        model_state_bytes(10, "fp8")
