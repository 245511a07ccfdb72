"""Activation bytes per layer as the pages write them, collected by hand per architecture (Korthikanti et al.'s parts,
adapted to SwiGLU, RMSNorm, GQA and dropless MoE): the independent reference that appendix 03's counted blocks and
chapter 6's 70B figure are claimed against. Written apart from distlab.memory.layer_activations' term list and
distlab.memory.activations' planner formula, so a mistake in either cannot pass here. Pure Python (no torch), so the
formula modules that check against it stay light."""

from __future__ import annotations


def expected(m, s: int, b: int, attention: str, recompute: str = "none") -> int:
    """The closed form collected by hand per architecture (the page's formulas), independent of the term list."""
    h, a, g, f = m.hidden, m.heads, m.kv, m.expert_ffn if m.experts else m.ffn
    sbh, sb = s * b * h, s * b
    if recompute == "full":
        return 2 * sbh
    stats = (1 if m.norm_kind == "rmsnorm" else 2) * 4 * sb  # fp32 statistics of one norm
    drop = m.trains_with_dropout
    common = 6 * sbh + 2 * stats + (2 * sbh if drop else 0)  # two norm inputs, the q/k/v input; dropout masks
    kv = 4 * sbh * g // a  # K and V at g heads
    if attention == "flash" or recompute == "selective":  # Q, K, V, O (and the log-sum-exp, unless recomputed)
        attn = 4 * sbh + kv + (4 * a * b * s if recompute == "none" else 0)
    else:  # Kᵀ, Q, V (K and V repeated to a heads), the output projection's input; the s x s terms
        attn = 8 * sbh + (5 if drop else 2) * a * s * s * b
    if m.experts:
        k = m.top_k
        n = sb * k  # dropless: N = sbk
        mlp = 2 * sbh + 12 * sb * k + 18 * n + 4 * n * h + 8 * n * f
    else:
        mlp = 2 * sbh + (8 if m.mlp == "swiglu" else 4) * sb * f
    return common + attn + mlp
