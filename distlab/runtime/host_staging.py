"""Collectives on CUDA tensors over gloo: through host memory.

When ranks share one GPU (fewer GPUs than ranks), NCCL refuses the world and the launcher falls back to gloo,
whose GPU support does not cover every collective. The one rule, used by every collective this project issues by
hand (data_parallel.ddp, data_parallel.syncbn, model_parallel.tensor_parallel): a CUDA tensor on a gloo group goes
to the host for the collective and its result comes back to the tensor's device; anything else (CPU tensors, NCCL)
is passed as it is.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def needs_host(t: torch.Tensor, group=None) -> bool:
    """Whether `t` must travel through host memory for a collective on `group`."""
    return t.is_cuda and dist.get_backend(group) == "gloo"


def to_host(t: torch.Tensor, group=None) -> torch.Tensor:
    """The tensor the collective runs on: a detached host copy when needed, else `t` itself."""
    return t.detach().cpu() if needs_host(t, group) else t


def all_reduce_(t: torch.Tensor, group=None, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """In-place all-reduce of `t` (returned), through the host when `needs_host`."""
    host = to_host(t, group)
    dist.all_reduce(host, op=op, group=group)
    if host is not t:
        t.copy_(host)
    return t


def broadcast_(t: torch.Tensor, src: int, group=None) -> torch.Tensor:
    """In-place broadcast of `t` from global rank `src` (returned), through the host when `needs_host`."""
    host = to_host(t, group)
    dist.broadcast(host, src, group=group)
    if host is not t:
        t.copy_(host)
    return t
