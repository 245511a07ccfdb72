"""A CUDA-shaped Kineto trace written from a recipe whose answers are known in closed form.

No GPU is needed to test a GPU-trace reader: each step is the DataLoader's wait (the GPU idles), K compute kernels of
`kernel_us` each separated by `gap_us` (the host's launch cost), and one NCCL all-reduce kernel on its own stream
that starts `overlap_us` (at most one kernel) before the last compute kernel ends and runs `comm_us`; `tail_us` of
idle GPU close the step. So per step, exactly:

    compute = K x kernel_us                        communication = comm_us
    overlapped = min(overlap_us, comm_us)          exposed = comm_us - overlapped
    idle between launches = (K - 1) x gap_us + tail_us     data wait = data_us
    step = data_us + K x kernel_us + (K - 1) x gap_us + exposed + tail_us

The same recipe with K in the tens of thousands makes the 100 MB trace the README's reading time is measured on.
Pure Python (json, gzip).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """One rank's steps; all times in integer microseconds."""

    rank: int = 0
    world_size: int = 1
    steps: int = 3
    kernels: int = 7
    """compute kernels per step"""
    kernel_us: int = 400
    gap_us: int = 30
    """the GPU's idle time between two compute kernels (the host launching the next)"""
    data_us: int = 200
    """the host waits in DataLoader.__next__ before the first launch; the GPU idles"""
    comm_us: int = 900
    overlap_us: int = 300
    tail_us: int = 50
    first_step: int = 5

    def __post_init__(self) -> None:
        for name in ("steps", "kernels", "kernel_us", "comm_us"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if min(self.gap_us, self.data_us, self.overlap_us, self.tail_us) < 0:
            raise ValueError("gaps, data wait, overlap and tail must be >= 0")
        if self.overlap_us > self.kernel_us:
            raise ValueError("overlap_us must be at most kernel_us (the all-reduce overlaps the last kernel only)")

    def expected(self) -> dict[str, float]:
        """Per step, in µs: the closed forms above."""
        overlapped = min(self.overlap_us, self.comm_us)
        exposed = self.comm_us - overlapped
        compute = self.kernels * self.kernel_us
        gaps = (self.kernels - 1) * self.gap_us
        return {
            "compute": compute,
            "communication": self.comm_us,
            "overlapped": overlapped,
            "exposed": exposed,
            "launch_gaps": gaps + self.tail_us,
            "data": self.data_us,
            "tail": self.tail_us,
            "step": self.data_us + compute + gaps + exposed + self.tail_us,
        }


def events(recipe: Recipe):
    """The trace's events, step by step (host thread 1/1, compute stream 0/7, NCCL stream 0/20)."""
    host, pid = 1, 1
    t = 1_000_000
    ids = iter(range(1, 1 << 62))
    e = recipe.expected()
    for k in range(recipe.steps):
        start = t
        yield _x("user_annotation", f"ProfilerStep#{recipe.first_step + k}", start, e["step"], pid, host)
        yield _x(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            t,
            recipe.data_us,
            pid,
            host,
        )
        t += recipe.data_us
        for i in range(recipe.kernels):
            c = next(ids)
            yield _x("cuda_runtime", "cudaLaunchKernel", t - min(recipe.gap_us, 5), min(recipe.gap_us, 5), pid, host, c)
            yield _x("kernel", f"void gemm_kernel<{i % 3}>(float const*, float*)", t, recipe.kernel_us, 0, 7, c)
            t += recipe.kernel_us + (recipe.gap_us if i < recipe.kernels - 1 else 0)
        comm_start = t - recipe.overlap_us
        yield _x("cpu_op", "nccl:all_reduce", comm_start - 3, 3, pid, host)
        yield _x(
            "kernel",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            comm_start,
            recipe.comm_us,
            0,
            20,
        )
        t = start + e["step"]


def _x(cat: str, name: str, ts: int, dur: int, pid: int, tid: int, correlation: int = 0) -> dict:
    args = {"correlation": correlation} if correlation else {}
    if cat == "kernel":
        args |= {"device": pid, "stream": tid}
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write(path: str, recipe: Recipe) -> None:
    """Write the trace as Kineto does (top-level metadata, then traceEvents one per line); gzipped if path ends .gz."""
    opener = gzip.open if path.endswith(".gz") else open
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "synthetic GPU"}],
        "distributedInfo": {"backend": "nccl", "rank": recipe.rank, "world_size": recipe.world_size},
    }
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("{\n" + "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in head.items()) + '  "traceEvents": [\n')
        first = True
        for ev in events(recipe):
            f.write(("" if first else ",\n") + "  " + json.dumps(ev))
            first = False
        f.write('\n  ],\n  "traceName": "synthetic"\n}\n')
