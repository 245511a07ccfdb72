"""The cost model's one constant fitted to published runs, and how well it holds on runs it was not fitted to.

Every other constant of the planner comes from a datasheet or a microbenchmark. One does not: the share of their
benchmarks' rates (the sustained matmul of distlab/data/planner.toml, FlashAttention's published figures) that a
training step's tensor-core kernels reach. A benchmark runs one kernel shape back to back on an otherwise idle GPU;
a training step interleaves dozens of shapes and layouts (the backward's transposed operands among them), runs
NCCL's kernels beside them, and changes the chip's power draw every few microseconds. No microbenchmark measures
that share, so it is fitted: once, to every covered run of the corpus at once (least squares in the log of
predicted / published throughput, each run weighted alike), never per run or per source.

A fitted constant is only as good as its fit on data it did not see, so `leave_one_source_out` fits it again
without each source and predicts that source with the result. Re-timing a plan is cheap, searching is not: each
run's plan is the one the search picks at the stored share (distlab.planner.planner_validation.prediction), and
its throughput is computed at every share of GRID (`curve`) and interpolated between them.

Pure Python: no numpy (the planner runs under Pyodide).
"""

from __future__ import annotations

import math

GRID = tuple(round(0.6 + 0.025 * i, 3) for i in range(17))  # shares 0.600 ... 1.000
"""The shares each run is timed at; the fit interpolates between them."""


def interpolate(curve: tuple[float, ...], share: float) -> float:
    """Throughput at `share` from its values on GRID (linear between grid points, clamped at the ends)."""
    if share <= GRID[0]:
        return curve[0]
    if share >= GRID[-1]:
        return curve[-1]
    i = min(int((share - GRID[0]) / (GRID[1] - GRID[0])), len(GRID) - 2)
    f = (share - GRID[i]) / (GRID[i + 1] - GRID[i])
    return curve[i] + f * (curve[i + 1] - curve[i])


def loss(curves: dict[str, tuple[float, ...]], published: dict[str, float], keys, share: float) -> float:
    """Sum over `keys` of log(predicted / published)^2 at `share`."""
    return sum(math.log(interpolate(curves[k], share) / published[k]) ** 2 for k in keys)


def fit(curves: dict[str, tuple[float, ...]], published: dict[str, float], keys) -> float:
    """The share minimising `loss` over `keys` (golden-section search on GRID's range; the loss is unimodal: each
    run's log error falls monotonically with the share)."""
    keys = list(keys)
    if not keys:
        raise ValueError("fit: no runs to fit to")
    lo, hi = GRID[0], GRID[-1]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if loss(curves, published, keys, a) < loss(curves, published, keys, b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def errors_at(curves, published, keys, share: float) -> dict[str, float]:
    """predicted / published - 1 for each of `keys` at `share`."""
    return {k: interpolate(curves[k], share) / published[k] - 1 for k in keys}


def leave_one_source_out(curves, published, groups: dict[str, list[str]]) -> dict[str, tuple[float, dict]]:
    """For each source: (the share fitted on every other source's runs, the held-out runs' errors at it)."""
    out = {}
    for name, held in groups.items():
        rest = [k for other, ks in groups.items() if other != name for k in ks]
        share = fit(curves, published, rest)
        out[name] = (share, errors_at(curves, published, held, share))
    return out


def curve(m, c, t, plan) -> tuple[float, ...]:
    """One run's predicted tokens/s per GPU at every share of GRID, its plan fixed."""
    from distlab.planner.cost import step

    return tuple(step(m, c, t, plan, share=g).tokens_per_second / plan.gpus for g in GRID)
