"""When a training step is bound by the CPU launching kernels rather than by the GPU running them.

A GPU runs what the CPU enqueues. Each kernel costs the host a fixed time c (the framework's dispatch plus the
driver's cudaLaunchKernel, "between 5-20 microseconds" by Holistic Trace Analysis' docs) however small the kernel,
while the kernel itself takes g = its bytes / HBM bandwidth or its FLOPs / peak. The CPU runs ahead of the GPU as
long as it can, so a step of K kernels takes

    max(K c, G)          G = the GPU's time for the step

and is launch-bound when K c > G. For a model of N parameters that is a number of tokens per GPU:

    T* = K c peak MFU / flops_per_token            (fewer tokens per step: the GPUs wait for the CPU)

and for one kernel a size: an elementwise kernel shorter than c x HBM bandwidth bytes, a square matmul smaller
than n with 2 n^3 = c x peak. The levers move c or K: CUDA graphs replay a captured sequence with one launch (the
per-kernel cost falls to the GPU's own kernel-to-kernel gap), fusion makes K smaller.

A host sync (`.item()`, `print(loss)`, a `.cpu()`) stops the CPU from running ahead: whatever the host does between
steps (H) is no longer hidden behind the GPU's work. With a sync per step the step takes H + max(K c, G) + the
pipeline's refill (one kernel: min(c, g)), against max(H + K c, G) without. `simulate_steps` checks both forms by
replaying the two-stage pipeline kernel by kernel.

Pure arithmetic (no torch); distlab.throughput.launch_overhead measures c and K on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass


def launch_bound_tokens(kernels: float, seconds_per_kernel: float, flops_per_token: float, peak: float, mfu: float):
    """Tokens per GPU per step below which the CPU's launches take longer than the GPU's work."""
    if min(kernels, seconds_per_kernel, flops_per_token, peak) <= 0 or not 0 < mfu <= 1:
        raise ValueError("kernels, seconds, FLOPs and peak must be positive and mfu in (0, 1]")
    return kernels * seconds_per_kernel * peak * mfu / flops_per_token


def elementwise_bound_bytes(seconds_per_kernel: float, hbm_bytes_per_s: float) -> float:
    """Bytes an elementwise kernel must move to take as long as its launch (read + write counted)."""
    return seconds_per_kernel * hbm_bytes_per_s


def matmul_bound_size(seconds_per_kernel: float, peak: float) -> float:
    """n of the square n x n x n matmul whose 2 n^3 FLOPs at peak take as long as one launch."""
    return (seconds_per_kernel * peak / 2) ** (1 / 3)


@dataclass(frozen=True, kw_only=True)
class StepShape:
    """One training step as a CPU-GPU pipeline: K equal kernels, host work H before the first launch."""

    kernels: int
    launch_s: float
    """c: CPU time to enqueue one kernel."""
    kernel_s: float
    """g: GPU time of one kernel."""
    host_s: float = 0.0
    """H: host work per step before its first launch (data, Python bookkeeping, logging)."""

    def __post_init__(self) -> None:
        if self.kernels < 1 or min(self.launch_s, self.kernel_s, self.host_s) < 0:
            raise ValueError("kernels must be >= 1 and times >= 0")


def step_seconds(shape: StepShape, sync: bool) -> float:
    """Steady-state seconds per step, closed form (module docstring)."""
    cpu, gpu = shape.host_s + shape.kernels * shape.launch_s, shape.kernels * shape.kernel_s
    if not sync:
        return max(cpu, gpu)
    return shape.host_s + max(shape.kernels * shape.launch_s, gpu) + min(shape.launch_s, shape.kernel_s)


def simulate_steps(shape: StepShape, sync: bool, steps: int = 50) -> float:
    """The same pipeline replayed kernel by kernel (the independent check): the CPU enqueues kernel i at its clock,
    the GPU starts it at max(enqueue time, end of kernel i-1); with `sync` the CPU waits at the end of each step for
    the GPU to drain. Returns the mean seconds per step over the last half of the steps (steady state)."""
    cpu = gpu = 0.0
    ends = []
    for _ in range(steps):
        cpu += shape.host_s
        for _ in range(shape.kernels):
            cpu += shape.launch_s
            gpu = max(gpu, cpu) + shape.kernel_s
        if sync:
            cpu = max(cpu, gpu)
        ends.append(max(cpu, gpu) if sync else gpu)
    half = steps // 2
    return (ends[-1] - ends[half - 1]) / (steps - half)
