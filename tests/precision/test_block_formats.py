"""Block-scaled formats (chapter 4) against independent references: the E2M1 values enumerated by hand, a brute-force
nearest-value search, a block quantized element by element in plain Python, Higham's summation bound."""

from __future__ import annotations

import math

import pytest
import torch

from distlab.precision.block_formats import (
    E4M3_MAX,
    HAND_BLOCK,
    HAND_OCP,
    HAND_TE,
    fp8_blocks,
    mx,
    nvfp4,
    round_e2m1,
    round_e4m3,
)
from distlab.precision.block_scaling import accumulate, higham_gamma, round_significand

E2M1_BY_HAND = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_e2m1_rounds_to_the_nearest_of_its_eight_values_ties_to_even():
    """Would catch a grid off by one code, a wrong tie rule (0.25 -> 0.5, 2.5 -> 3, 5 -> 6 are wrong) or a missing
    clamp at 6."""
    ties = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0, 7.0: 6.0, 100.0: 6.0}
    x = torch.tensor(list(ties), dtype=torch.float64)
    assert round_e2m1(x).tolist() == list(ties.values())
    assert round_e2m1(-x).tolist() == [-v for v in ties.values()]
    g = torch.Generator().manual_seed(1)
    y = torch.rand(997, generator=g, dtype=torch.float64) * 8 - 4
    brute = [min(E2M1_BY_HAND, key=lambda v: abs(v - abs(t))) * math.copysign(1, t) for t in y.tolist()]
    assert round_e2m1(y).tolist() == brute  # random values hit no exact tie


def test_mx_block_matches_the_hand_worked_values():
    """Would catch the OCP floor rule replaced by a round-up (or the reverse), a wrong emax (8 for e4m3) or a
    missing clamp: 1000 -> 896 under OCP's rule, 1024 under Transformer Engine's."""
    block = torch.tensor([HAND_BLOCK], dtype=torch.float64)
    assert mx(block, "e4m3", rule="ocp").values[0].tolist() == HAND_OCP
    assert mx(block, "e4m3", rule="ceil").values[0].tolist() == HAND_TE


def _nvfp4_by_hand(row: list[float], amax: float) -> list[float]:
    """NVFP4 of one row of a tensor whose amax is `amax`, block by block in plain Python (TE's formulas)."""
    s_global = float(torch.tensor(amax / (448 * 6)).float())
    out = []
    for i in range(0, len(row), 16):
        blk = row[i : i + 16]
        s_blk = float(
            torch.tensor(max(abs(v) for v in blk) / 6 / s_global, dtype=torch.float64).to(torch.float8_e4m3fn)
        )
        for v in blk:
            t = min(abs(v) / (s_blk * s_global), 6.0)
            out.append(
                math.copysign(min(E2M1_BY_HAND, key=lambda g: (abs(g - t), E2M1_BY_HAND.index(g) % 2)), v)
                * s_blk
                * s_global
            )
    return out


def test_nvfp4_matches_a_plain_python_version_at_an_awkward_width():
    """Would catch the block scale kept in fp32 instead of E4M3, the tensor scale missing, or blocks taken down a
    column instead of along a row. 3 rows x 48 (three 16-blocks), values spread over 5 decades."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 48, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-3, 2, (3, 48), generator=g)
    got = nvfp4(x).values
    for i in range(3):
        assert got[i].tolist() == pytest.approx(_nvfp4_by_hand(x[i].tolist(), x.abs().max().item()), rel=1e-12, abs=0)


def test_block_scales_bound_the_error_and_keep_rows_independent():
    """1x128 blocks: each row's error is that of its own scale (a tiny row next to a huge one loses nothing); per
    tensor, the tiny row underflows. Would catch blocks that span rows."""
    x = torch.ones(2, 256, dtype=torch.float64)
    x[0] *= 1e6
    x[1] *= 1e-3 * (1 + torch.arange(256, dtype=torch.float64) / 256)
    block = fp8_blocks(x, 1, 128)
    assert block.underflow == 0
    rel = ((block.values - x).abs() / x.abs()).max().item()
    assert rel <= 2.0**-4
    assert fp8_blocks(x, *x.shape).underflow == 256  # 1e-3 / 1e6 * 448 is below e4m3's smallest subnormal


def test_e4m3_cast_agrees_with_torch_and_saturates():
    """The saturating e4m3 cast: 2 x 448 -> 448 (never NaN)."""
    assert round_e4m3(torch.tensor([2 * E4M3_MAX, -1e9, 1.0])).tolist() == [448.0, -448.0, 1.0]


def test_round_significand_matches_bf16_and_fp32_casts():
    """8 significant bits is bf16 and 24 is fp32 (round to nearest even): would catch an off-by-one in the width."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1000, generator=g, dtype=torch.float64) * 1e3
    assert torch.equal(round_significand(x, 8), x.to(torch.bfloat16).double())
    assert torch.equal(round_significand(x, 24), x.float().double())


def test_accumulator_error_within_higham_bound_and_promotion_helps():
    """A 14-bit running sum over K = 1000 stays within gamma_K * sum|a w| (Higham), promotion every 128 within
    gamma_128-ish, and a 24-bit sum is fp32-close. Would catch promotion that drops the last partial chunk."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(3, 1000, generator=g, dtype=torch.float64)
    w = torch.randn(5, 1000, generator=g, dtype=torch.float64)
    exact, scale = a @ w.T, a.abs() @ w.abs().T
    plain = accumulate(a, w, 14)
    promoted = accumulate(a, w, 14, promote_every=128)  # 1000 = 7 x 128 + 104: a ragged last chunk
    assert ((plain - exact).abs() / scale).max() <= higham_gamma(1000, 2.0**-14)
    assert ((promoted - exact).abs() / scale).max() <= higham_gamma(128, 2.0**-14) + higham_gamma(9, 2.0**-24) * 2
    assert (promoted - exact).norm() < (plain - exact).norm()
