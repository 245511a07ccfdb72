"""Torch's intra-op thread count for CPU measurements, set for a block and always restored.

On the 2-core build machine, OpenMP workers that spin on a busy core turn millisecond kernels into tens of
milliseconds; one thread is far steadier. Restoring the count matters: the build runs every experiment in
one process, and a count left at 1 would slow every experiment after it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def one_core(device: str) -> contextlib.AbstractContextManager:
    """One thread on CPU; nothing changes on CUDA."""
    return torch_threads(1) if device == "cpu" else contextlib.nullcontext()


def single_threaded(fn):
    """Decorator: run `fn` on one torch thread, restoring the count after."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch_threads(1):
            return fn(*args, **kwargs)

    return run
