"""One launcher for every multi-process experiment: run `fn(rank, world_size, *args)` on real
torch.distributed processes and return each rank's result.

- Locally it spawns `world_size` processes (gloo on CPU, NCCL with one GPU per rank on CUDA) on a
  free port, with a deadline: a rank that raises, dies or hangs is named in a one-line LaunchError,
  and every process is stopped (children also die with the parent, via PR_SET_PDEATHSIG).
- Under `torchrun` (RANK and WORLD_SIZE set) it runs `fn` in the current process on the group that
  torchrun set up and all-gathers the results, so the same experiment code runs on a real cluster.

`fn` must be importable (a module-level function in distlab): spawned processes unpickle it.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue
import signal
import socket
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist


class LaunchError(RuntimeError):
    """A rank failed, died or hung. The message is one line naming it."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "DISTLAB_SPAWNED" not in os.environ


def launch(fn, world_size: int, *args, device: str = "cpu", backend: str | None = None,
           timeout_s: float = 120.0) -> list:
    """Run fn(rank, world_size, *args) on `world_size` processes; return results in rank order."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    backend = backend or default_backend(device)
    if under_torchrun():
        return _run_under_torchrun(fn, args, device, backend, timeout_s)
    ctx = mp.get_context("spawn")
    results_q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(fn, rank, world_size, args, device, backend, port, timeout_s,
                                                 results_q), name=f"distlab-rank{rank}")
             for rank in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world_size:
            try:
                status, rank, payload = results_q.get(timeout=0.2)
            except queue.Empty:
                for rank, p in enumerate(procs):
                    if rank not in results and p.exitcode not in (None, 0):
                        raise LaunchError(f"rank {rank} of {world_size} died with exit code {p.exitcode} "
                                          f"({_signal_name(p.exitcode)})") from None
                if time.monotonic() > deadline:
                    missing = [r for r in range(world_size) if r not in results]
                    raise LaunchError(f"rank {missing[0]} of {world_size} hung: no result after {timeout_s:g} s "
                                      f"(ranks without a result: {missing})") from None
                continue
            if status == "error":
                rank, payload = _root_cause(results_q, rank, payload)
                raise LaunchError(f"rank {rank} of {world_size} failed: {payload}")
            results[rank] = payload
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        _stop(procs)
        results_q.close()
        results_q.join_thread()
    return [results[r] for r in range(world_size)]


def _root_cause(results_q, rank: int, payload: str) -> tuple[int, str]:
    """When one rank fails, its peers fail too ("connection closed by peer"); name the first rank whose
    error did not come from the collective layer."""
    errors = [(rank, payload)]
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        try:
            status, r, p = results_q.get(timeout=0.05)
        except queue.Empty:
            continue
        if status == "error":
            errors.append((r, p))
    return next((e for e in errors if "distributed_c10d" not in e[1]), errors[0])


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return "signal"
    return "exited"


def _stop(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(fn, rank, world_size, args, device, backend, port, timeout_s, results_q) -> None:
    _die_with_parent()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), DISTLAB_SPAWNED="1")
    torch.set_num_threads(1)  # every rank shares the machine's cores
    try:
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s))
        result = fn(rank, world_size, *args)
        results_q.put(("ok", rank, result))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line, before peers notice
        last = traceback.extract_tb(exc.__traceback__)[-1]
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        results_q.put(("error", rank, f"{type(exc).__name__}: {first_line} ({os.path.basename(last.filename)}:"
                                      f"{last.lineno})"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run_under_torchrun(fn, args, device, backend, timeout_s) -> list:
    started_here = not dist.is_initialized()
    if started_here:
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    try:
        result = fn(dist.get_rank(), dist.get_world_size(), *args)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, result)
        return gathered
    finally:
        if started_here:
            dist.destroy_process_group()
