"""Issue 25's additions to practice 4-6 and the cheat sheet, against hand arithmetic typed here."""

import math

import pytest


def test_practice_flash_chain_and_scores_memory():
    """Practice 4: the speed-up chain's roofline row is chapter 8's count for one 7B layer (32 heads, N = 4096,
    d = 128), the causal row doubles FlashAttention's speed, and standard attention keeps 2 bytes per score more
    without dropout, 5 with it. Would catch the two speed-ups drifting apart again or 5as^2b quoted for a planner
    that trains without dropout."""
    from distlab.practice.why_flash_attention import practice_flash

    r = practice_flash("cpu")
    q = {k: v.value for k, v in r.quantities.items()}
    assert q["causal_roofline_speedup"] == pytest.approx(2 * q["roofline_speedup"], rel=1e-12)
    assert q["roofline_speedup"] < q["speedup"] < q["causal_roofline_speedup"]
    assert q["scores_nodropout_bytes"] == pytest.approx(32 * 4096 * 4096 * 2, rel=0.01)
    assert q["scores_dropout_bytes"] == pytest.approx(32 * 4096 * 4096 * 5, rel=0.01)
    assert q["varlen_attention_ratio"] == 4096 / 512
    assert all(c.passed for c in r.claims)


def test_practice_checkpoint_days_and_levers():
    """Practice 6: days from 6ND and from D(6N + 12Lhs) differ by 1 + 12Lhs/6N (Llama 2 70B: 80 layers, h = 8192,
    s = 4096, 68,976,648,192 parameters); an async save stalls for one 1024th of the 14-byte checkpoint over PCIe 5
    x16 (63.0 GB/s per direction). Would catch the days quietly switching FLOP count, or the stall using the
    storage rate."""
    from distlab.practice.checkpoint_interval import practice_checkpoint

    r = practice_checkpoint("cpu")
    q = {k: v.value for k, v in r.quantities.items()}
    n = 68_976_648_192
    factor = 1 + 12 * 80 * 8192 * 4096 / (6 * n)
    assert q["days_full"] / q["days_6nd"] == pytest.approx(factor, rel=1e-9)
    assert q["async_stall"] == pytest.approx(14 * n / 1024 / (32e9 * 16 * 128 / 130 / 8), rel=1e-9)
    assert q["sync_interval"] == pytest.approx(math.sqrt(2 * q["sync_stall"] * q["mtbf_h"] * 3600), rel=1e-9)
    assert q["storage_bytes_per_s"] == 100e9
    assert all(c.passed for c in r.claims)


def test_practice_mfu_dtype_and_padding():
    """Practice 5: tf32 caps an H100 at half its bf16 peak (494.5 / 989), fp32 at 67 / 989; the padded share is the
    sourced mean length over 4096. Would catch the ceilings read against the sparse peak."""
    from distlab.practice.diagnose_28_mfu import practice_mfu_budget

    r = practice_mfu_budget("cpu")
    q = {k: v.value for k, v in r.quantities.items()}
    assert q["tf32_ceiling"] == pytest.approx(494.5 / 989, rel=1e-9)
    assert q["fp32_ceiling"] == pytest.approx(67 / 989, rel=1e-9)
    assert q["pad_real_share"] == pytest.approx(q["pad_mean_tokens"] / 4096, rel=1e-12)
    assert 0 < q["best_headroom"] < q["team_headroom"] < 1


def test_cheatsheet_numbers_by_hand():
    """The cheat sheet's own numbers: fp8 ridges (1979 TFLOP/s / 3.35 TB/s on an H100), 16/18/20 bytes per parameter,
    2(N-1)/N at N = 1024, and the published H100 MFU band inside (0.2, 0.7). Would catch a ridge taken against the
    sparse peak or a band built from HFU rows."""
    from distlab.practice.cheatsheet import cheatsheet

    r = cheatsheet("cpu")
    q = {k: v.value for k, v in r.quantities.items()}
    assert q["h100_ridge_fp8"] == pytest.approx(1979e12 / 3.35e12, rel=1e-9)
    assert (q["bytes_per_param"], q["bytes_per_param_fp32_grads"], q["bytes_per_param_fp32_accum"]) == (16, 18, 20)
    assert q["ring_factor_1024"] == pytest.approx(2 * 1023 / 1024, rel=1e-12)
    assert 0.2 < q["mfu_h100_low"] <= q["mfu_h100_median"] <= q["mfu_h100_high"] < 0.7
    assert all(c.passed for c in r.claims)
