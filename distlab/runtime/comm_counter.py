"""Count the bytes that really pass through a process group, by hooking every collective it runs.

Every torch.distributed collective, whether Python calls it (`dist.all_reduce`, FSDP2's all-gathers and
reduce-scatters) or C++ does (DDP's reducer), reaches the dispatcher as a `c10d` operator
(`c10d.allreduce_`, `c10d._allgather_base_`, ...). `CommCounter` is a TorchDispatchMode that sees each of
them before it runs and records its buffer size, so nothing has to be wrapped or patched, and a library
cannot bypass it. The mode follows the backward pass (autograd carries it to its threads).

Per call it records the message size S in nccl-tests' convention (distlab.hardware.collectives): the reduced
buffer for all-reduce, the whole gathered output for all-gather, the whole input for reduce-scatter. The
bytes one rank sends is S times the ring factor of distlab.hardware.collectives (2(N-1)/N for all-reduce, (N-1)/N
for all-gather and reduce-scatter), which is what the ZeRO traffic formulas count.

    with CommCounter(world_size) as comm:
        loss.backward()
    comm.sent_bytes("all-reduce"), comm.summary()
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from distlab.hardware.collectives import steps_and_factor

# c10d operator -> (collective, index of the argument that holds the message S)
_OPS = {
    "allreduce_": ("all-reduce", 0),
    "allreduce_coalesced_": ("all-reduce", 0),
    "_allgather_base_": ("all-gather", 0),
    "allgather_": ("all-gather", 0),
    "allgather_coalesced_": ("all-gather", 0),
    "allgather_into_tensor_coalesced_": ("all-gather", 0),
    "_reduce_scatter_base_": ("reduce-scatter", 1),
    "reduce_scatter_": ("reduce-scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce-scatter", 1),
    "broadcast_": ("broadcast", 0),
    "alltoall_base_": ("all-to-all", 1),
    "alltoall_": ("all-to-all", 1),
}
_KNOWN = {op for op, _ in _OPS.values()}


def tensor_bytes(obj) -> int:
    """Bytes of the tensors in a tensor or (nested) list of tensors; anything else counts 0."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(o) for o in obj)
    return 0


class CommCounter(TorchDispatchMode):
    """Records every c10d collective issued while active: calls and message bytes per collective."""

    def __init__(self, world_size: int):
        super().__init__()
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.calls: dict[str, int] = defaultdict(int)
        self.message_bytes: dict[str, int] = defaultdict(int)
        self.log: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "c10d":
            name = func._schema.name.split("::", 1)[1]
            op, index = _OPS.get(name, (name, None))
            size = tensor_bytes(args[index]) if index is not None else tensor_bytes(list(args))
            self.calls[op] += 1
            self.message_bytes[op] += size
            self.log.append((op, size))
        return func(*args, **kwargs)

    def sent_bytes(self, op: str | None = None) -> float:
        """Bytes this rank sends for `op` (or for every counted collective): S times the ring factor."""
        if op is not None and op not in _KNOWN:
            raise ValueError(f"unknown collective {op!r}; known: {', '.join(sorted(_KNOWN))}")
        ops = [op] if op else [o for o in self.message_bytes if o in _KNOWN]
        return sum(steps_and_factor(o, self.world_size)[1] * self.message_bytes.get(o, 0) for o in ops)

    def summary(self) -> dict[str, dict[str, float]]:
        """{collective: {"calls", "message_bytes", "sent_bytes"}} for every collective seen."""
        return {
            op: {
                "calls": self.calls[op],
                "message_bytes": self.message_bytes[op],
                "sent_bytes": self.sent_bytes(op) if op in _KNOWN else 0.0,
            }
            for op in sorted(self.calls)
        }
