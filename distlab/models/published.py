"""The chapters' preset models (distlab/data/models.toml) against what their sources print, as claims.

A typo in a shape (80 layers typed 90) or a wrong term in `ModelShape.params` would move every number built on
the presets, so each page that shows them claims them against a second route:
- the Llama presets: the parameter count derived from the shape = the released checkpoint's own count, exact;
- GPT-3 175B, whose weights were never released: the numbers the paper's sentences print, quoted here
  verbatim and parsed, so a typo in either the data or the quote fails;
- Llama 2's sequence length: the context length the Llama 2 paper prints.
"""

from __future__ import annotations

import re

from distlab.core.results import Result
from distlab.models.shapes import ModelShape, catalog, presets, published_params

# Brown et al. 2020, "Language Models are Few-Shot Learners" (https://arxiv.org/abs/2005.14165), Section 2.1 and
# Table 2.1 (n_params, n_layers, d_model, n_heads, d_head, batch, learning rate), and Radford et al. 2019 (GPT-2),
# Section 2.3, whose tokenizer GPT-3 reuses.
GPT3_QUOTES = {
    "table_2_1": "GPT-3 175B or “GPT-3” 175.0B 96 12288 96 128 3.2M 0.6 × 10−4",
    "ffn": "we always have the feedforward layer four times the size of the bottleneck layer, dff = 4 ∗ dmodel",
    "context": "All models use a context window of nctx = 2048 tokens.",
    "vocab": "The vocabulary is expanded to 50,257.",
}
# Touvron et al. 2023, "Llama 2" (https://arxiv.org/abs/2307.09288), Table 1, the Llama 2 row.
LLAMA2_CONTEXT_QUOTE = "Llama 2 | new mix of publicly available online data | 7B 13B 34B 70B | 4k | ✓ | 2.0T"
GPT3_COUNT_TOLERANCE = 0.005  # the table prints 0.1B; its count's convention (biases, positions) is not stated


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


def gpt3_table_row() -> dict[str, float]:
    """Table 2.1's GPT-3 row, parsed: the 3 of '175B' in the name is skipped."""
    n = _numbers(GPT3_QUOTES["table_2_1"].split("”", 1)[1])
    return {"params_billion": n[0], "layers": n[1], "hidden": n[2], "heads": n[3], "head_dim": n[4]}


def llama2_context() -> int:
    """'4k' in Table 1: 4 x 1024 tokens (the released config's max_position_embeddings)."""
    k = re.search(r"\| (\d+)k \|", LLAMA2_CONTEXT_QUOTE)
    assert k is not None
    return int(k.group(1)) * 1024


def claim_checkpoint_count(r: Result, name: str) -> None:
    """One model's parameter count from its shape against its released checkpoint's (presets and catalog alike)."""
    m = catalog()[name]
    published = published_params(name)
    if published is not None:
        r.claim(f"{m.name}: parameters from its shape = the released checkpoint's count", m.params(), published)


def claim_llama2_context(r: Result, m: ModelShape) -> None:
    r.claim(f"{m.name}: sequence length = Table 1's context length (4k)", m.seq, llama2_context())


def claim_gpt3(r: Result, gpt3: ModelShape) -> None:
    """GPT-3 175B's shape against the numbers the paper's sentences print."""
    row = gpt3_table_row()
    r.claim("GPT-3: layers = Table 2.1's n_layers", gpt3.layers, row["layers"])
    r.claim("GPT-3: width = Table 2.1's d_model", gpt3.hidden, row["hidden"])
    r.claim("GPT-3: heads = Table 2.1's n_heads", gpt3.heads, row["heads"])
    r.claim("GPT-3: width / heads = Table 2.1's d_head", gpt3.hidden / gpt3.heads, row["head_dim"])
    r.claim("GPT-3: multi-head attention, one K/V head per query head", gpt3.kv_heads, gpt3.heads)
    r.claim("GPT-3: MLP width = 4 x d_model (Section 2.1)", gpt3.ffn, 4 * row["hidden"])
    r.claim("GPT-3: sequence = the paper's n_ctx", gpt3.seq, _numbers(GPT3_QUOTES["context"])[0])
    r.claim("GPT-3: vocabulary = GPT-2's 50,257 (reused tokenizer)", gpt3.vocab, _numbers(GPT3_QUOTES["vocab"])[0])
    r.claim(
        "GPT-3: parameters from its shape = Table 2.1's 175.0B",
        gpt3.params(),
        row["params_billion"] * 1e9,
        rel_tol=GPT3_COUNT_TOLERANCE,
        unit="params",
        formula="Table 2.1 prints one decimal and no counting convention",
    )


def claim_presets(r: Result) -> None:
    """Every preset against its source: checkpoint counts, GPT-3's printed shape, Llama 2's printed context."""
    models = presets()
    for name, m in models.items():
        claim_checkpoint_count(r, name)
        if m.name.startswith("Llama 2"):
            claim_llama2_context(r, m)
    claim_gpt3(r, models["175B"])
