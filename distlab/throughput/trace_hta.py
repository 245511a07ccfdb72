"""The two figures Holistic Trace Analysis (HTA) computes that `distlab trace` shares, with HTA's own definitions.

HTA (Meta's `HolisticTraceAnalysis`, 0.5.0) reads the same Kineto traces. Its temporal breakdown, per rank, over
the GPU kernels of every profiled step but the last (HTA drops the last iteration while reading):

    kernel time  = end of the last kernel - start of the first
    idle         = kernel time - |union of all kernels|
    compute      = |union of compute kernels|   (neither NCCL nor Memcpy/Memset)
    non-compute  = kernel time - compute - idle (communication and memory copies not hidden under compute)

and its communication/computation overlap = |comm ∩ compute| / |comm|. Same traces, same definitions: the numbers
must agree, which tests/throughput/test_trace.py checks against HTA's output. HTA reads GPU kernels only, so on a CPU
trace it has nothing to measure (0.5.0 fails with an IndexError); there `cpu_kernels=True` uses the training
thread's operators as the kernels, and the tests check that against a naive reference instead.
"""

from __future__ import annotations

from distlab.throughput.trace_diagnose import RankView
from distlab.throughput.trace_intervals import intersect, length, union
from distlab.throughput.trace_read import Trace


def _kernels(view: RankView, lo: float, hi: float) -> tuple[list, list, list]:
    """(all, compute, communication) kernel ranges that start in [lo, hi)."""
    if view.gpu:
        work = [(a, b, c, n) for a, b, c, n, _ in view.trace.events if c in ("kernel", "gpu_memcpy", "gpu_memset")]
        comm = [(a, b) for a, b, c, n in work if c == "kernel" and "nccl" in n.lower()]
        compute = [
            (a, b) for a, b, c, n in work if c == "kernel" and "nccl" not in n.lower() and "mem" not in n[:6].lower()
        ]
        every = [(a, b) for a, b, _, _ in work]
    else:
        compute = list(view.compute)
        comm = list(view.comm)
        every = compute + comm
    keep = [[(a, b) for a, b in rs if lo <= a < hi] for rs in (every, compute, comm)]
    return keep[0], keep[1], keep[2]


def temporal_breakdown(trace: Trace) -> dict[str, float]:
    """HTA's temporal breakdown of one rank, in µs: kernel, idle, compute, non-compute time."""
    view = RankView(trace)
    starts = sorted(a for a, _ in view.steps.values())
    lo, hi = starts[0], starts[-1] if len(starts) > 1 else float("inf")
    every, compute, _ = _kernels(view, lo, hi)
    merged = union(every)
    if not merged:
        raise ValueError(f"{trace.path}: no kernels in the profiled steps")
    kernel = merged[-1][1] - merged[0][0]
    idle = kernel - length(merged)
    busy = length(union(compute))
    return {"kernel_us": kernel, "idle_us": idle, "compute_us": busy, "non_compute_us": kernel - busy - idle}


def comm_comp_overlap(trace: Trace) -> float:
    """HTA's communication/computation overlap of one rank: the share of communication time under compute."""
    view = RankView(trace)
    starts = sorted(a for a, _ in view.steps.values())
    lo, hi = starts[0], starts[-1] if len(starts) > 1 else float("inf")
    _, compute, comm = _kernels(view, lo, hi)
    comm_u = union(comm)
    total = length(comm_u)
    return length(intersect(comm_u, union(compute))) / total if total else 0.0
