"""The HBM traffic model against closed forms derived by hand from the paper's algorithms, a tiny case
counted on paper, Theorem 2's Θ bounds, and the published Figure 2 numbers. All counts are integers and
exact; only the Θ-constant and the published comparisons have tolerances.
"""

import math

import pytest

from distlab.attention.flash_attention_flops import flash_attention_flops
from distlab.attention.flash_attention_io import flash_attention_io
from distlab.attention.hbm_traffic import (
    Traffic,
    fa1_blocks,
    fitted_exponent,
    flash2_forward,
    flash_backward,
    flash_forward,
    roofline_seconds,
    standard_backward,
    standard_forward,
    total,
)
from distlab.core.facts import entries, fact

AWKWARD = [(1, 16, 64), (97, 64, 4096), (1000, 64, 116736), (4099, 128, 98304), (257, 32, 1000)]


def test_standard_attention_counts_algorithms_0_and_3():
    """Forward: S written and read, P written and read (4N^2) plus Q, K, V read and O written (4Nd).
    Backward: 7N^2 + 8Nd. Would catch a step that forgets to read P or write dS."""
    for n, d in ((97, 64), (1024, 128)):
        fwd, bwd = total(standard_forward(n, d)), total(standard_backward(n, d))
        assert fwd.elements == 4 * n * d + 4 * n * n
        assert bwd.elements == 8 * n * d + 7 * n * n
        assert fwd.matmul_flops == 4 * n * n * d and bwd.matmul_flops == 8 * n * n * d


def test_tiny_case_counted_on_paper():
    """N=4, d=2, M=8: B_c = ceil(8/8) = 1, B_r = min(1, 2) = 1, so 4 x 4 inner steps.
    Reads: K_j, V_j 4 x (2 + 2) = 16; per step Q_i, O_i (2 + 2) and l_i, m_i (2): 16 x 6 = 96 -> 112.
    Writes: O, l, m initialised 8 + 8 = 16; per step O_i (2), l_i, m_i (2): 16 x 4 = 64 -> 80."""
    t = flash_forward(4, 2, 8)
    assert (t.reads, t.writes) == (112, 80)
    assert t.matmul_flops == 4 * 4 * 4 * 2 and t.exps == 16


@pytest.mark.parametrize("n,d,m", AWKWARD)
def test_loops_equal_hand_derived_closed_forms(n, d, m):
    """Alg. 1: 3Nd + 2N + T_c(3Nd + 4N); Alg. 4: 5Nd + T_c(5Nd + 2N); FA-2 order: 2Nd + N + T_r 2Nd, with
    T_c = ceil(N / ceil(M/4d)) and T_r likewise. Would catch a ragged last block counted as a full one."""
    bc = math.ceil(m / (4 * d))
    tc = math.ceil(n / bc)
    assert flash_forward(n, d, m).elements == 3 * n * d + 2 * n + tc * (3 * n * d + 4 * n)
    assert flash_backward(n, d, m).elements == 5 * n * d + tc * (5 * n * d + 2 * n)
    assert flash2_forward(n, d, m).elements == 2 * n * d + n + tc * 2 * n * d


@pytest.mark.parametrize("n,d,m", AWKWARD)
def test_flops_do_not_depend_on_the_tiling(n, d, m):
    """Ragged tiles must add up to exactly 4N^2 d (forward) and 10N^2 d (backward, with the recompute)."""
    assert flash_forward(n, d, m).matmul_flops == 4 * n * n * d
    assert flash2_forward(n, d, m).matmul_flops == 4 * n * n * d
    assert flash_backward(n, d, m).matmul_flops == 10 * n * n * d
    assert flash_forward(n, d, m).exps == n * n == flash_backward(n, d, m).exps


def test_theorem_2_theta_bounds():
    """Over d <= M <= Nd the counted traffic divided by N^2 d^2 / M stays within constants (Θ): between
    12 (the leading term) and 16, whatever N, d and M; standard attention's / (Nd + N^2) between 4 and 4."""
    for n in (2048, 8192):
        for d in (32, 64, 128):
            for m in (4 * d * 16, 4 * d * 64, n * d // 2):
                ratio = flash_forward(n, d, m).elements / (n * n * d * d / m)
                assert 12 <= ratio <= 16, (n, d, m, ratio)
            std = total(standard_forward(n, d)).elements / (n * d + n * n)
            assert std == 4


def test_block_sizes_follow_algorithm_1():
    assert fa1_blocks(4096, 64, 116736) == (64, 456)  # B_c = ceil(116736 / 256) = 456, B_r = min(456, 64)
    assert fa1_blocks(4096, 128, 1024) == (2, 2)
    with pytest.raises(ValueError, match="M >= d"):
        fa1_blocks(100, 64, 32)


def test_flash_moves_less_than_standard_and_fa2_order_less_than_fa1():
    for n in (2048, 16384):
        std = total(standard_forward(n, 64)).elements
        fa1, fa2 = flash_forward(n, 64, 116736).elements, flash2_forward(n, 64, 116736).elements
        assert fa2 < fa1 < std


def test_fitted_exponent_recovers_a_power_law():
    xs = [3, 7, 50, 1000]
    assert fitted_exponent(xs, [2.5 * x**1.7 for x in xs]) == pytest.approx(1.7, rel=1e-12)


def test_roofline_seconds_takes_the_slower_roof_per_kernel():
    """One compute-bound kernel (1 s of FLOPs, 0.5 s of bytes) and one memory-bound (0 FLOPs, 2 s)."""
    steps = [("a", Traffic(reads=250, matmul_flops=1000)), ("b", Traffic(writes=2000))]
    assert roofline_seconds(steps, peak=1000, bandwidth=1000) == pytest.approx(1 + 4)  # 2 bytes/element


def test_every_fact_has_a_source_and_unit():
    for entry, row in entries("flash_attention").items():
        for field in row:
            if field not in ("source", "sources"):
                f = fact(f"flash_attention.{entry}.{field}")
                assert f.source.url.startswith("https://") and f.source.title and f.source.detail
                if entry.startswith("FA"):  # the FlashAttention papers themselves
                    assert f.source.url.startswith("https://arxiv.org/"), f.path


def test_experiments_claims_pass():
    """The page's claims, run here too: loop = closed form, exponents, published Figure 2 comparisons."""
    for run in (flash_attention_io, flash_attention_flops):
        result = run("cpu")
        assert result.claims and not result.failed_claims, [c.describe() for c in result.failed_claims]
    flops = flash_attention_flops("cpu")
    assert flops.quantities["d64_flop_ratio"].value == pytest.approx(14 / 12)
    # Figure 2: 4.4 GB published for FlashAttention; the count with the paper's M = 192 KB is within 15 %
    assert flops.quantities["gpt2_fa_hbm"].value == pytest.approx(4.4e9, rel=0.15)
