"""HBM traffic and FLOPs of attention, counted from the algorithms' own loops.

Dao et al. 2022 (FlashAttention, arXiv:2205.14135), Theorem 2 and 5: with an on-chip SRAM of M elements
(d <= M <= N d), standard attention (their Algorithms 0 and 3) reads and writes Θ(N d + N^2) elements of
HBM, FlashAttention (Algorithms 1 and 4) Θ(N^2 d^2 / M). Here every load and store of those algorithms
is counted as it happens in the block loops, per head, in elements (x bytes per element for bytes), and
so are the matrix-multiply FLOPs and the exponentials. Block sizes are the paper's: B_c = ceil(M / 4d),
B_r = min(B_c, d). `flash2_forward` is the same work in FlashAttention-2's loop order (queries outside,
keys inside), which reads Q and writes O once instead of once per key block.

Experiments: `flash-attention-io` (traffic across N, d and M against the Θ forms) and
`flash-attention-flops` (why FlashAttention is faster although it does more FLOPs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

H100 = "H100-SXM"  # the GPU the chapter's tables and roofline use
BYTES = 2  # bf16 / fp16 elements


@dataclass(frozen=True)
class Traffic:
    """HBM elements read and written, matrix-multiply FLOPs and exponentials of one step, or a sum."""

    reads: int = 0
    writes: int = 0
    matmul_flops: int = 0
    exps: int = 0

    @property
    def elements(self) -> int:
        return self.reads + self.writes

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.reads + other.reads,
            self.writes + other.writes,
            self.matmul_flops + other.matmul_flops,
            self.exps + other.exps,
        )


def fitted_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x: y ~ x^slope."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def total(steps) -> Traffic:
    return sum((t for _, t in steps), Traffic())


def fa1_blocks(n: int, d: int, m: int) -> tuple[int, int]:
    """(B_r, B_c) of Algorithm 1 for SRAM of m elements: K_j, V_j, Q_i, O_i and S_ij fit on chip.
    (Theorem 2's Θ form assumes d <= M <= N d; above N d a single block holds all of K and V.)"""
    if n < 1 or d < 1 or m < d:
        raise ValueError(f"need N >= 1, d >= 1 and M >= d; got N={n}, d={d}, M={m} elements")
    bc = math.ceil(m / (4 * d))
    return min(bc, d), bc


def _blocks(n: int, size: int):
    """Row counts of the blocks that split n rows into pieces of `size` (the last one ragged)."""
    return [min(size, n - start) for start in range(0, n, size)]


# ---------------------------------------------------------------- standard attention (S and P in HBM)
def standard_forward(n: int, d: int) -> list[tuple[str, Traffic]]:
    """Algorithm 0, one step per line: S = Q K^T, P = softmax(S), O = P V."""
    return [
        ("S = QK^T", Traffic(reads=2 * n * d, writes=n * n, matmul_flops=2 * n * n * d)),
        ("P = softmax(S)", Traffic(reads=n * n, writes=n * n, exps=n * n)),
        ("O = PV", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d)),
    ]


def standard_backward(n: int, d: int) -> list[tuple[str, Traffic]]:
    """Algorithm 3: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = dS K, dK = dS^T Q."""
    return [
        ("dV = P^T dO", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d)),
        ("dP = dO V^T", Traffic(reads=2 * n * d, writes=n * n, matmul_flops=2 * n * n * d)),
        ("dS", Traffic(reads=2 * n * n, writes=n * n)),
        ("dQ = dS K", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d)),
        ("dK = dS^T Q", Traffic(reads=n * n + n * d, writes=n * d, matmul_flops=2 * n * n * d)),
    ]


def standard_closed(n: int, d: int) -> tuple[int, int]:
    """(HBM elements, matmul FLOPs) of Algorithms 0 + 3 added up by hand from the paper, independently of the step
    lists above. Forward: reads Q, K (2Nd), S (N^2), P (N^2), V (Nd), writes S, P (2N^2), O (Nd): 4Nd + 4N^2.
    Backward: reads P, dO for dV; dO, V for dP; P, dP for dS; dS, K for dQ; dS, Q for dK (5Nd + 5N^2), writes
    dV, dP, dS, dQ, dK (3Nd + 2N^2): 8Nd + 7N^2. FLOPs: two N x N x d matmuls forward, four backward: 12 N^2 d."""
    return 12 * n * d + 11 * n * n, 12 * n * n * d


# ---------------------------------------------------------------- FlashAttention, counted in the loops
def flash_forward(n: int, d: int, m: int) -> Traffic:
    """Algorithm 1: for each K/V block j, stream every Q/O/l/m block i through SRAM."""
    br, bc = fa1_blocks(n, d, m)
    reads, writes, flops, exps = 0, n * d + 2 * n, 0, 0  # line 2: O = 0, l = 0, m = -inf set in HBM
    for cols in _blocks(n, bc):
        reads += 2 * cols * d  # line 6: K_j, V_j
        for rows in _blocks(n, br):
            reads += 2 * rows * d + 2 * rows  # line 8: Q_i, O_i, l_i, m_i
            writes += rows * d + 2 * rows  # lines 12-13: O_i, l_i, m_i
            flops += 4 * rows * cols * d  # S_ij = Q_i K_j^T and P_ij V_j
            exps += rows * cols
    return Traffic(reads, writes, flops, exps)


def flash_backward(n: int, d: int, m: int) -> Traffic:
    """Algorithm 4: for each K/V block j, stream Q, O, dO, dQ, l, m blocks; P recomputed on chip."""
    br, bc = fa1_blocks(n, d, m)
    reads, writes, flops, exps = 0, n * d, 0, 0  # line 5: dQ = 0 in HBM (dK_j, dV_j live on chip)
    for cols in _blocks(n, bc):
        reads += 2 * cols * d  # line 7: K_j, V_j
        writes += 2 * cols * d  # line 24: dK_j, dV_j, once
        for rows in _blocks(n, br):
            reads += 4 * rows * d + 2 * rows  # line 10: Q_i, O_i, dO_i, dQ_i, l_i, m_i
            writes += rows * d  # line 21: dQ_i
            flops += 10 * rows * cols * d  # S (recomputed), dV, dP, dQ, dK
            exps += rows * cols
    return Traffic(reads, writes, flops, exps)


def flash2_forward(n: int, d: int, m: int) -> Traffic:
    """FlashAttention-2's order: each Q block stays on chip while every K/V block streams past it; O and
    the log-sum-exp are written once. Blocks mirror Algorithm 1's with the roles of rows and keys swapped."""
    bc, br = fa1_blocks(n, d, m)
    reads, writes, flops, exps = 0, 0, 0, 0
    for rows in _blocks(n, br):
        reads += rows * d  # Q_i, once
        writes += rows * d + rows  # O_i and L_i, once
        for cols in _blocks(n, bc):
            reads += 2 * cols * d  # K_j, V_j, once per query block
            flops += 4 * rows * cols * d
            exps += rows * cols
    return Traffic(reads, writes, flops, exps)


def flash_forward_closed(n: int, d: int, m: int) -> int:
    """Elements moved by Algorithm 1: 3Nd + 2N + T_c (3Nd + 4N), T_c = ceil(N / B_c); ~12 N^2 d^2 / M."""
    tc = math.ceil(n / fa1_blocks(n, d, m)[1])
    return 3 * n * d + 2 * n + tc * (3 * n * d + 4 * n)


def flash_backward_closed(n: int, d: int, m: int) -> int:
    """Elements moved by Algorithm 4: 5Nd + T_c (5Nd + 2N); ~20 N^2 d^2 / M."""
    tc = math.ceil(n / fa1_blocks(n, d, m)[1])
    return 5 * n * d + tc * (5 * n * d + 2 * n)


# ---------------------------------------------------------------- experiment: more FLOPs, yet faster
def roofline_seconds(steps, peak: float, bandwidth: float) -> float:
    """Each kernel takes at least max(FLOPs / peak, bytes / bandwidth); kernels run one after another."""
    return sum(max(t.matmul_flops / peak, t.elements * BYTES / bandwidth) for _, t in steps)
