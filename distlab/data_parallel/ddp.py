"""Data parallelism, naive first: what every data-parallel experiment of chapter 5 shares.

Data parallelism keeps a full replica of the model on each of W ranks, gives each rank a different
slice of the global batch, and averages the gradients before every optimizer step, so all replicas
take the same step. `DataParallelNaive` does exactly that with one all-reduce per parameter after
backward; PyTorch's DistributedDataParallel (DDP) does the same sum in buckets, during backward
(ddp_buckets.py). ddp_consistency.py checks that both equal one process training on the global batch.

Process groups are passed as arguments, never kept in a module-level singleton: one world of 4 ranks
runs the checks for W = 2, 3 and 4 on sub-groups of it (`subgroups`), which is the cheap way to cover
three world sizes with one start-up.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from distlab.runtime.host_staging import all_reduce_, broadcast_

__all__ = ["DataParallelNaive", "all_reduce_", "ddp", "float64_vector", "mlp", "rank_device", "regression_batch"]


def rank_device(device: str) -> torch.device:
    """The device of this rank's tensors: its GPU (the launcher has set it) or the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")


def subgroups(sizes: tuple[int, ...]) -> dict[int, dist.ProcessGroup]:
    """A group of the first `w` ranks for each w in `sizes`. Every rank must call this (new_group is
    collective), in the same order, including the ranks outside a group."""
    return {w: dist.new_group(list(range(w))) for w in sizes}


class DataParallelNaive(nn.Module):
    """The whole idea in a dozen lines: broadcast rank 0's weights once, then after each backward
    all-reduce every parameter's gradient (one collective per tensor) and divide by W.

    Correct, and slow in two ways DDP fixes: one small collective per tensor pays the per-call latency
    many times (DDP packs tensors into buckets), and nothing is sent until backward has finished (DDP
    sends each bucket as soon as its gradients are ready, overlapping compute)."""

    def __init__(self, module: nn.Module, group=None):
        super().__init__()
        self.module, self.group = module, group
        with torch.no_grad():
            for p in module.parameters():
                broadcast_(p.data, dist.get_global_rank(group, 0) if group else 0, group)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def sync_gradients(self) -> None:
        size = dist.get_world_size(self.group)
        for p in self.module.parameters():
            if p.grad is not None:
                all_reduce_(p.grad, self.group)
                p.grad.div_(size)


def ddp(module: nn.Module, device: str, group=None, **kwargs) -> nn.parallel.DistributedDataParallel:
    """DDP on this rank's device (one GPU per process, or the CPU)."""
    ids = [torch.cuda.current_device()] if device == "cuda" else None
    return nn.parallel.DistributedDataParallel(module, device_ids=ids, process_group=group, **kwargs)


def mlp(sizes: tuple[int, ...], seed: int, dtype=torch.float32, device: str | torch.device = "cpu") -> nn.Sequential:
    """Linear layers with tanh between them, initialised from `seed` (ranks can start different)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers).to(dtype=dtype, device=device)


def float64_vector(tensors) -> torch.Tensor:
    """All values of `tensors` (parameters or gradients) as one float64 CPU vector, for comparisons."""
    return torch.cat([t.detach().reshape(-1).double().cpu() for t in tensors])


def regression_batch(
    step: int, rows: int, features: int, outputs: int, dtype=torch.float32, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of `step`: the same on every rank (each takes its own slice), different per step.
    Targets come from a fixed random teacher plus noise."""
    g = torch.Generator().manual_seed(10_000 + step)
    x = torch.randn(rows, features, generator=g, dtype=torch.float64)  # (rows, features)
    teacher = torch.randn(features, outputs, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = torch.tanh(x @ teacher) + 0.1 * torch.randn(rows, outputs, generator=g, dtype=torch.float64)
    return x.to(dtype=dtype, device=device), y.to(dtype=dtype, device=device)
