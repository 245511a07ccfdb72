"""FlashAttention-4's tricks (chapter 8): the software exp2 and conditional rescaling against exact float64 maths."""

from __future__ import annotations

import math

import torch

from distlab.attention.flash_attention4 import exp2_emulated, fit_exp2_poly, online_softmax


def test_software_exp2_is_exact_at_integers_and_close_elsewhere():
    """2^x at integers is exact (p(0) = 1, the integer part goes into the exponent); elsewhere the cubic's worst
    relative error stays under 2e-4. Would catch floor vs trunc on negative inputs (2^-0.5 would become 2^0.5)."""
    c = fit_exp2_poly(3)
    ints = torch.arange(-40, 5, dtype=torch.float64)
    assert torch.equal(exp2_emulated(ints, c), torch.exp2(ints))
    x = torch.tensor([-0.5, -7.25, -19.999, 3.3], dtype=torch.float64)
    assert ((exp2_emulated(x, c) - torch.exp2(x)).abs() / torch.exp2(x)).max() < 2e-4


def test_conditional_rescaling_is_exact_when_the_max_keeps_growing():
    """Scores that rise along the keys (the running max grows in every block): rescaling only past a threshold of
    2^3 must still give the exact softmax, with fewer rescales. 37 rows, 301 keys, blocks of 19 (ragged)."""
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(37, 301, generator=g, dtype=torch.float64) + torch.linspace(0, 30, 301, dtype=torch.float64)
    v = torch.randn(301, 7, generator=g, dtype=torch.float64)
    exact = torch.softmax(scores, dim=1) @ v
    every, n_every = online_softmax(scores, v, 19, 0.0)
    cond, n_cond = online_softmax(scores, v, 19, 3.0)
    torch.testing.assert_close(every, exact, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cond, exact, rtol=1e-12, atol=1e-12)
    assert 0 < n_cond < n_every
    assert n_every <= 37 * (math.ceil(301 / 19) - 1)
