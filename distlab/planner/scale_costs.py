"""Costs that grow with the number of ranks N, which a per-GPU cost model leaves out.

Stragglers (chapter 10, distlab.throughput.stragglers): a synchronous step ends when its slowest rank does. With N
ranks whose step times are independent draws mu (1 + jitter Z_i), Z_i standard normal,

    E[step] = mu (1 + jitter E[Z_(N)]),   E[Z_(N)] = integral of z N phi(z) Phi(z)^(N-1) dz,

the expected largest of N standard normals (0 at N = 1, 2.5 at 128, 3.4 at 2048: about sqrt(2 ln N) for large N).
The per-rank jitter is Cluster.rank_jitter (`distlab plan --rank-jitter`), 0 by default; RANK_JITTER is chapter
10's stated scenario (2 % of the step), not a measurement and not fitted: no source on file gives the per-step
spread of one rank's time on a training cluster. Switched on for every published run it makes chapter 13's
validation worse, so it is not the default (experiment scale-costs shows both). Looked for and not found: Llama
3's report (Section 3.3.4) gives a time-of-day swing of the whole job (every rank at once: no growth with N);
Sinha et al. (SC'22) the spread between a cluster's GPUs on HPC kernels (V100, MI60), not between a rank's steps;
ByteDance's straggler study (OSDI'25) reports per-job slowdowns, of which only the abstract is on file. Closing
chapter 13's gap with stragglers alone would take several times that (experiment scale-costs, jitter_needed).

Fabric oversubscription (Cluster.oversubscription) divides the bandwidth between NVLink domains: see
distlab.planner.config.Cluster.nic_bytes_per_s_per_gpu.

Pure Python (the planner runs under Pyodide): the integral by the trapezoid rule on a fixed grid, as chapter 10's.
"""

from __future__ import annotations

import functools
import math

RANK_JITTER = 0.02
"""Standard deviation of one rank's step time over its mean: chapter 10's stated scenario
(distlab.throughput.stragglers.JITTER; a test keeps the two equal). An assumption, not a measurement."""

_Z_MAX, _POINTS = 12.0, 24_001


@functools.cache
def _grid() -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    step = 2 * _Z_MAX / (_POINTS - 1)
    z = tuple(-_Z_MAX + i * step for i in range(_POINTS))
    cdf = tuple(0.5 * math.erfc(-v / math.sqrt(2)) for v in z)  # Phi(z), accurate in both tails
    pdf = tuple(math.exp(-0.5 * v * v) / math.sqrt(2 * math.pi) for v in z)
    return z, cdf, pdf


@functools.lru_cache(maxsize=1024)
def expected_max_standard_normal(n: int) -> float:
    """E[max of n iid N(0, 1)]: the integral of z n phi(z) Phi(z)^(n-1) over z (trapezoid rule)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if n == 1:
        return 0.0
    z, cdf, pdf = _grid()
    f = [zi * n * p * c ** (n - 1) for zi, p, c in zip(z, pdf, cdf)]
    return sum((f[i] + f[i + 1]) * (z[i + 1] - z[i]) for i in range(len(z) - 1)) / 2


def straggler_seconds(step_seconds: float, ranks: int, jitter: float = RANK_JITTER) -> float:
    """What waiting for the slowest of `ranks` ranks adds to a step whose mean time on one rank is step_seconds."""
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {jitter!r}")
    return step_seconds * jitter * expected_max_standard_normal(ranks)
