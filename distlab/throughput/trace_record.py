"""Record real PyTorch profiler traces from a 2-rank training run with one fault injected, for `distlab trace`.

Each rank trains the same small MLP with DDP (gloo on CPU, NCCL on CUDA) under `torch.profiler` with a schedule
(skip a step, warm up one, record ACTIVE_STEPS) and an `on_trace_ready` that writes one Kineto/Chrome-trace JSON per
rank: `DIR/NAME-rank<R>.json` (gzipped with `.json.gz`). The faults are the ones chapter 10 teaches, each made large
enough that another process's load on the machine cannot hide it (load stretches every op and every gap about
equally; it cannot turn a sleep into compute or move an all-reduce out of backward):

- `healthy`: compute-heavy steps (a wide MLP on a large batch), DDP overlaps its small gradient all-reduce with
  backward; data is ready at once.
- `slow-dataloader`: the same model, but each batch comes from a Dataset whose transform sleeps (DATA_SLEEP_S per
  batch, about twice the step's compute) in the main process: the step waits for data.
- `straggler`: rank 1 does STRAGGLER_FACTOR x the compute of rank 0 (a slower GPU, a throttled node); rank 0 waits
  for it inside the all-reduce.
- `exposed-allreduce`: no DDP: backward finishes, then the gradients and a large buffer (EXPOSED_ELEMENTS floats,
  standing for a big embedding table's gradient) are all-reduced in one blocking call: nothing overlaps it.
- `launch-bound`: a deep stack of tiny layers on a tiny batch: thousands of operators per step, each doing almost no
  work, so the host's per-operator cost (Python, dispatcher, autograd, a kernel launch on a GPU) is the step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

from distlab.runtime.launcher import launch
from distlab.throughput.profile_step import quiet_profiler
from distlab.throughput.trace_diagnose import DEMOS

WAIT_STEPS, WARMUP_STEPS, ACTIVE_STEPS = 1, 1, 7
WIDTH, DEPTH, BATCH = 384, 3, 512  # the compute-heavy MLP: 3 layers x 6 x 512 x 384^2 FLOPs = 1.4 GFLOP per step
TINY_WIDTH, TINY_DEPTH, TINY_BATCH = 8, 160, 2  # launch-bound: one tiny layer applied 160 times, ~2000 operators
DATA_SLEEP_S = 0.2  # slow-dataloader: the transform's sleep per batch (the step computes ~20 ms, ~100 ms under load)
STRAGGLER_FACTOR = 5  # straggler: rank 1's compute per step, in multiples of rank 0's (forward = 1/3 of a step)
EXPOSED_ELEMENTS = 16 * 2**20  # exposed-allreduce: 64 MiB of fp32 reduced after backward


class Batches(Dataset):
    """Random (x, y) batches; a transform that sleeps `sleep_s` per batch stands for slow decoding."""

    def __init__(self, n: int, width: int, batch: int, sleep_s: float):
        self.n, self.width, self.batch, self.sleep_s = n, width, batch, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(index)
        return torch.randn(self.batch, self.width, generator=g), torch.randn(self.batch, self.width, generator=g)


class Repeated(nn.Module):
    """One small layer applied `times` times: thousands of operators per step on one weight (so the optimizer stays
    small and the step is all per-operator overhead, as in a launch-bound GPU step)."""

    def __init__(self, width: int, times: int):
        super().__init__()
        self.layer, self.times = nn.Linear(width, width), times

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.times):
            x = torch.tanh(self.layer(x))
        return x


def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers)


def trace_path(out_dir: str, name: str, rank: int, gzipped: bool = False) -> Path:
    return Path(out_dir) / f"{name}-rank{rank}.json{'.gz' if gzipped else ''}"


def record_rank(rank: int, world: int, name: str, out_dir: str, device: str, gzipped: bool) -> str:
    """Rank function: train WAIT + WARMUP + ACTIVE steps of demo `name` under the profiler; return the trace path."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    tiny = name == "launch-bound"
    width, depth, batch = (TINY_WIDTH, TINY_DEPTH, TINY_BATCH) if tiny else (WIDTH, DEPTH, BATCH)
    if device == "cuda" and not tiny:
        width, batch = 2048, 4096  # a GPU needs far more work per step (~5 ms) for compute to dominate its launches
    core = (Repeated(width, depth) if tiny else mlp(width, depth)).to(dev)
    overlap = name != "exposed-allreduce"
    model = DDP(core, device_ids=[dev.index] if device == "cuda" else None) if overlap else core
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS
    data = Batches(steps, width, batch, DATA_SLEEP_S if name == "slow-dataloader" else 0.0)
    loader = iter(DataLoader(data, batch_size=None))
    extra = torch.zeros(EXPOSED_ELEMENTS, device=dev) if name == "exposed-allreduce" else None
    extra_forwards = 3 * (STRAGGLER_FACTOR - 1) if (name == "straggler" and rank == 1) else 0
    path = trace_path(out_dir, name, rank, gzipped)

    def write(prof) -> None:
        prof.export_chrome_trace(str(path))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    quiet_profiler()
    with profile(
        activities=activities,
        schedule=schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=ACTIVE_STEPS),
        on_trace_ready=write,
    ) as prof:
        for _ in range(steps):
            x, y = (t.to(dev) for t in next(loader))
            with torch.no_grad():  # the straggler's extra compute: forwards thrown away (1 forward = 1/3 step)
                for _ in range(extra_forwards):
                    core(x).square().mean().item()
            loss = (model(x) - y).square().mean()
            loss.backward()
            if not overlap:  # what DDP would have overlapped, done after backward, blocking
                for g in [p.grad for p in core.parameters()] + [extra]:
                    dist.all_reduce(g)
                    g /= world
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return str(path)


def _backend(device: str) -> str:
    """NCCL with a GPU per rank; with one GPU for both ranks (a single-GPU runner), gloo on CUDA tensors."""
    return "nccl" if device == "cuda" and torch.cuda.device_count() >= 2 else "gloo"


def record_demo(name: str, out_dir: str, *, device: str = "cpu", gzipped: bool = False) -> list[str]:
    """Record demo `name` on 2 ranks; return the per-rank trace files, in rank order."""
    if name not in DEMOS:
        raise ValueError(f"unknown demo {name!r}; known: {', '.join(DEMOS)}")
    os.makedirs(out_dir, exist_ok=True)
    return launch(
        record_rank,
        2,
        name,
        str(Path(out_dir).resolve()),
        device,
        gzipped,
        device=device,
        backend=_backend(device),
        timeout_s=300,
    )


def record_all_rank(rank: int, world: int, out_dir: str, device: str) -> list[str]:
    """Every demo in one world (one process start for all five: it dominates a short recording's time)."""
    paths = []
    for name in DEMOS:
        dist.barrier()
        paths.append(record_rank(rank, world, name, out_dir, device, False))
    return paths


def record_all(out_dir: str, *, device: str = "cpu") -> dict[str, list[str]]:
    """Record all demos on 2 ranks; return demo name -> per-rank trace files."""
    os.makedirs(out_dir, exist_ok=True)
    per_rank = launch(
        record_all_rank, 2, str(Path(out_dir).resolve()), device, device=device, backend=_backend(device), timeout_s=300
    )
    return {name: [per_rank[r][i] for r in range(2)] for i, name in enumerate(DEMOS)}
