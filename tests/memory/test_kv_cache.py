"""The KV cache (chapter 3): the formula against hand arithmetic for published shapes, the command's output, and a
cached decoder at awkward sizes whose decode must equal its uncached forward."""

from __future__ import annotations

import json

import torch

from distlab.core.cli import main
from distlab.memory.kv_cache import CacheShape, kv_cache_bytes, sequences_that_fit
from distlab.memory.kv_cache_measured import CachedDecoder, CachedGQA, CachedMLA, cache_bytes, decode


def test_formula_matches_hand_arithmetic_for_published_shapes():
    """Llama 3 8B: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token; DeepSeek-V3's MLA:
    61 x (512 + 64) x 2 B = 70,272 B. Would catch a missing factor 2 (K and V) or MLA counted per head."""
    llama = CacheShape(layers=32, kv_heads=8, head_dim=128)
    assert kv_cache_bytes(llama, seq=1, batch=1, bytes_per_element=2) == 131_072
    assert kv_cache_bytes(llama, seq=8192, batch=3, bytes_per_element=1) == 131_072 // 2 * 8192 * 3
    dsv3 = CacheShape(layers=61, attention="mla", kv_lora_rank=512, rope_dim=64)
    assert kv_cache_bytes(dsv3, seq=1, batch=1, bytes_per_element=2) == 70_272
    assert sequences_that_fit(10 * 131_072 * 100 - 1, llama, seq=100, bytes_per_element=2) == 9


def test_command_json_and_text(capsys):
    """`distlab kv-cache --json` reports the same total as the formula; would catch the batch left out."""
    args = ["--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--seq", "8192", "--batch", "3"]
    assert main(["kv-cache", *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_bytes"] == 2 * 80 * 8 * 128 * 8192 * 3 * 2
    assert out["bytes_per_token"] == 327_680
    assert (
        main(
            [
                "kv-cache",
                "--layers",
                "61",
                "--attention",
                "mla",
                "--kv-lora-rank",
                "512",
                "--rope-dim",
                "64",
                "--seq",
                "5",
                "--dtype",
                "fp8",
            ]
        )
        == 0
    )
    assert "KV cache (MLA, fp8)" in capsys.readouterr().out


def test_cached_decode_equals_uncached_forward_at_awkward_sizes():
    """5 query heads over 1 KV head (MQA), head dim 6, 2 layers, 37 tokens with a 1-token prompt; MLA with a latent
    of 7. Would catch a cache appended in the wrong order, a causal mask off by the offset, or a cache that
    keeps the decompressed heads instead of the latent (bytes)."""
    torch.manual_seed(0)
    tokens = torch.randint(0, 29, (2, 37))
    for layers, per_token in (
        ([CachedGQA(30, 5, 1, 6) for _ in range(2)], 2 * 2 * 1 * 6),
        ([CachedMLA(30, 5, 7, 4, 6, 5) for _ in range(2)], 2 * (7 + 4)),
    ):
        model = CachedDecoder(layers, 30, 29).double()
        with torch.no_grad():
            cached, caches = decode(model, tokens, 1)
            full = model(tokens)
        torch.testing.assert_close(cached, full, rtol=1e-12, atol=1e-12)
        assert cache_bytes(caches) == per_token * 37 * 2 * 8
