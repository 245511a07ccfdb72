"""The kernel model worked by hand (distlab.planner.kernels_checks): the claim holds as written, and each of the
mistakes the guard audit found escaping chapter 7 fails it."""

import pytest

from distlab.core.results import Result, worst_relative_gap
from distlab.planner import kernels
from distlab.planner.kernels_checks import kernel_model_by_hand, kernel_model_pairs


def _worst() -> float:
    return worst_relative_gap(kernel_model_pairs())


def test_the_worked_layers_and_head_match_the_kernel_model():
    """Four layers (each term and each forward GEMM), a head and a borrowed chip: 52 terms, equal to rounding."""
    pairs = kernel_model_pairs()
    assert len(pairs) == 4 * (6 + 2 + 4) + 2 + 2
    assert _worst() < 1e-12
    r = Result("kernels", "cpu")
    kernel_model_by_hand(r)
    assert len(r.claims) == 1 and r.claims[0].passed


@pytest.mark.parametrize(
    ("name", "planted", "at_least"),
    [
        ("TILE_N", 512, 0.01),  # the GEMM tile doubled: other waves, other times
        ("TILE_M", 256, 0.01),
        ("FLASH_BACKWARD", 5.0, 0.5),  # FlashAttention's backward counted as 5 forwards, not 2.5
        ("MEMORY_EFFICIENCY", 1.6, 0.4),  # the memory-bound kernels at twice 80 % of the HBM bandwidth
        ("FP8_CAST_BYTES", 8, 0.1),  # the fp8 case's casts
    ],
)
def test_a_planted_constant_fails_the_claim(monkeypatch, name, planted, at_least):
    monkeypatch.setattr(kernels, name, planted)
    assert _worst() > at_least


def test_a_wrong_sustained_ratio_fails_the_claim(monkeypatch):
    """FlashAttention's Hopper figures divided by MSMF / MAMF instead of multiplied: 0.88 squared apart."""
    kernels.flash_flops_per_s.cache_clear()
    monkeypatch.setattr(kernels, "_sustained_over_burst", lambda: 848.4 / 744.8)
    try:
        assert _worst() > 0.2
    finally:
        kernels.flash_flops_per_s.cache_clear()
