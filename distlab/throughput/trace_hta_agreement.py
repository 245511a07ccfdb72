"""trace-hta-agreement: `distlab trace` and Holistic Trace Analysis read the same CUDA-shaped traces the same way.

Three ranks of the synthetic recipe (distlab.throughput.trace_synthetic, awkward sizes, gzipped) are written, read by
distlab's streaming reader and measured with HTA's definitions (distlab.throughput.trace_hta). Two references:
the recipe's closed form (HTA drops the last step, so S = steps - 1 steps count: kernel span S x step - data wait -
tail, compute S x K x kernel, idle S (K - 1) gap + (S - 1)(tail + data), overlap = overlap / comm), and what HTA 0.5.0
itself printed for exactly these files. HTA is not a dependency (its requirements pull jupyterlab), so its output
was taken once, on this machine, and is kept here; and HTA reads GPU kernels only (0.5.0 raises IndexError on a CPU
trace), which is why the CPU demos are checked against a naive raster instead (trace-demos).
"""

from __future__ import annotations

import os
import tempfile

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.throughput.trace_hta import comm_comp_overlap, temporal_breakdown
from distlab.throughput.trace_read import read_trace
from distlab.throughput.trace_synthetic import Recipe, write

AWKWARD = dict(world_size=3, steps=5, kernels=97, gap_us=13, data_us=1000, comm_us=1009, overlap_us=101, tail_us=7)
# HolisticTraceAnalysis 0.5.0 (pandas 3.1.1), TraceAnalysis(trace_dir=...).get_temporal_breakdown(visualize=False)
# and .get_comm_comp_overlap(visualize=False) on these three files, 2026-12-04: per rank idle, compute, non-compute,
# kernel time (µs) and overlap (%, two decimals as HTA prints it).
HTA_0_5_0 = {
    0: (8013, 99716, 3632, 111361, 10.01),
    1: (8013, 103596, 3632, 115241, 10.01),
    2: (8013, 107476, 3632, 119121, 10.01),
}


def recipe(rank: int) -> Recipe:
    return Recipe(rank=rank, kernel_us=257 + 10 * rank, **AWKWARD)


def closed_form(rc: Recipe) -> dict[str, float]:
    s, e = rc.steps - 1, rc.expected()
    return {
        "kernel_us": s * e["step"] - rc.data_us - rc.tail_us,
        "compute_us": s * rc.kernels * rc.kernel_us,
        "idle_us": s * (rc.kernels - 1) * rc.gap_us + (s - 1) * (rc.tail_us + rc.data_us),
        "overlap": rc.overlap_us / rc.comm_us,
    }


@experiment(
    "trace-hta-agreement",
    "HTA's temporal breakdown and comm/compute overlap from distlab's reader vs closed forms and HTA 0.5.0's output",
    kind="computed",
)
def trace_hta_agreement(device: str) -> Result:
    r = Result("trace-hta-agreement", kind="computed")
    rows = []
    with tempfile.TemporaryDirectory(prefix="distlab-hta-") as tmp:
        for rank in range(3):
            path = os.path.join(tmp, f"rank{rank}.json.gz")
            write(path, recipe(rank))
            trace = read_trace(path)
            b, overlap = temporal_breakdown(trace), comm_comp_overlap(trace)
            ref = closed_form(recipe(rank))
            hta_idle, hta_compute, hta_non_compute, hta_kernel, hta_overlap = HTA_0_5_0[rank]
            shares = [100 * b[k] / b["kernel_us"] for k in ("idle_us", "compute_us", "non_compute_us")]
            hta_share = 100 * hta_compute / hta_kernel
            rows.append([rank, *(f"{x:.2f} %" for x in (*shares, 100 * overlap, hta_share, hta_overlap))])
            # the shown shares against HTA's own printed times, and HTA's compute share against the closed form
            for what, shown, theirs in zip(("idle", "compute", "non-compute"), shares, HTA_0_5_0[rank]):
                r.claim(
                    f"rank {rank}: shown {what} share = HTA 0.5.0's time / its kernel time",
                    shown,
                    100 * theirs / hta_kernel,
                    rel_tol=1e-9,
                )
            r.claim(
                f"rank {rank}: shown HTA compute share = the closed form's",
                hta_share,
                100 * ref["compute_us"] / ref["kernel_us"],
                rel_tol=1e-9,
            )
            for key in ("kernel_us", "compute_us", "idle_us"):
                r.claim(f"rank {rank}: {key[:-3]} time = the recipe's closed form", b[key], ref[key], unit="µs")
            r.claim(f"rank {rank}: comm/compute overlap = overlap / comm", overlap, ref["overlap"], rel_tol=1e-12)
            for key, theirs in zip(("idle_us", "compute_us", "non_compute_us", "kernel_us"), HTA_0_5_0[rank][:4]):
                r.claim(f"rank {rank}: {key[:-3]} time = HTA 0.5.0's", b[key], theirs, unit="µs")
            shown_overlap = float(rows[-1][4].split()[0])
            r.claim(
                f"rank {rank}: shown overlap = HTA 0.5.0's (to its 2 decimals)",
                shown_overlap,
                hta_overlap,
                abs_tol=0.005,
            )
    r.add("ranks", 3, "ranks", "synthetic ranks compared")
    r.table(
        "agreement",
        ["rank", "idle", "compute", "non-compute", "comm/compute overlap", "HTA 0.5.0: compute", "HTA 0.5.0: overlap"],
        rows,
        caption="Shares of the kernel span (HTA's definitions), distlab's reader vs HTA 0.5.0 on the same synthetic "
        "CUDA-shaped traces (3 ranks, 97 kernels of 257-277 µs per step, gzipped)",
    )
    return r
