"""What autograd keeps for backward, counted: a saved-tensor hook that accounts every buffer by storage, and a
naive activation checkpoint whose own saves go through the same hooks (so a recompute is visible).

Instrumentation like the collective counter beside it: used by chapter 3's experiments (`activation-memory`,
`checkpointing`, `activation-memory-models`), knows no topic.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Record:
    """One buffer saved for backward: where it was first saved, its shape, dtype and storage bytes."""

    module: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int


class SavedTensors:
    """Accounts every tensor autograd saves for backward while active, in forward and in backward.

    Bytes are those of a saved tensor's storage, each storage counted once while it is held (a buffer
    saved by two operations, or three views of one buffer, is one allocation); parameters apart, and the
    module's buffers too (RoPE's cos and sin tables, computed once and shared by every layer: model state, not
    per-token activations). A saved buffer is released when backward has unpacked every save of it (autograd
    frees it right after). `live` is what is held now, `peak` the most ever held, `by_module` the bytes by the
    innermost module running when a buffer was first saved (`outside` when none is), `records` every buffer
    in the order it was first saved.
    """

    def __init__(self, model: nn.Module, *, outside: str = "(outside)"):
        self.model = model
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.constants = {b.untyped_storage().data_ptr() for b in model.buffers()}
        self.param_bytes, self.live, self.peak = 0, 0, 0
        self.by_module: dict[str, int] = defaultdict(int)
        self.records: list[Record] = []
        self._params_seen: set[int] = set()
        self._held: dict[int, list[int]] = {}  # storage pointer -> [saves not yet unpacked, bytes]
        self._where = [outside]
        self._handles: list = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self) -> SavedTensors:
        for name, mod in self.model.named_modules():
            self._handles.append(mod.register_forward_pre_hook(self._enter(name or "block")))
            self._handles.append(mod.register_forward_hook(self._leave))
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()

    def _enter(self, name: str):
        def hook(module, args) -> None:
            self._where.append(name)

        return hook

    def _leave(self, module, args, out) -> None:
        self._where.pop()

    @property
    def buffers(self) -> int:
        return len(self._held)

    def _pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if ptr in self.params:
            if ptr not in self._params_seen:
                self._params_seen.add(ptr)
                self.param_bytes += nbytes
            return None, t
        if nbytes == 0 or ptr in self.constants:
            return None, t
        if ptr in self._held:
            self._held[ptr][0] += 1
        else:
            self._held[ptr] = [1, nbytes]
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            self.by_module[self._where[-1]] += nbytes
            self.records.append(Record(self._where[-1], tuple(t.shape), str(t.dtype).removeprefix("torch."), nbytes))
        return ptr, t

    def _unpack(self, packed):
        ptr, t = packed
        held = self._held.get(ptr)
        if held is not None:
            held[0] -= 1
            if held[0] == 0:
                self.live -= held[1]
                del self._held[ptr]
        return t


# ---------------------------------------------------------------- checkpointing
def _rng_state(device: torch.device):
    return torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


class Checkpoint(torch.autograd.Function):
    """Naive activation checkpointing (Chen et al. 2016, https://arxiv.org/abs/1604.06174): save only
    the inputs, run `fn` without a graph; in backward run it again with one, and back-propagate through it.
    The RNG state is restored for the second run, so dropout draws the same masks."""

    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.fn, ctx.rng = fn, _rng_state(inputs[0].device)
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        cpu, cuda = ctx.rng
        with torch.random.fork_rng(devices=[inputs[0].device] if cuda is not None else []), torch.enable_grad():
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state(cuda, inputs[0].device)
            out = ctx.fn(*inputs)
        torch.autograd.backward(out, grads)
        return (None, *(x.grad for x in inputs))
