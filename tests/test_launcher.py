"""The multi-process launcher: real gloo processes, failures named by rank, no orphans left."""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from distlab.launcher import LaunchError, launch


def _sum_ranks(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item(), os.getpid()


def _raise_on_rank_1(rank, world):
    if rank == 1:
        raise ValueError("deliberate")
    dist.barrier()


def _hang_on_last(rank, world):
    if rank == world - 1:
        time.sleep(600)
    return rank


def _kill_rank_0(rank, world):
    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_all_reduce_on_three_real_processes():
    out = launch(_sum_ranks, 3)
    assert [v for v, _ in out] == [6.0, 6.0, 6.0]  # 1 + 2 + 3 on every rank
    assert all(not _alive(pid) for _, pid in out)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_raise_on_rank_1, r"rank 1 of 3 failed: ValueError: deliberate"),
        (_hang_on_last, r"rank 2 of 3 hung"),
        (_kill_rank_0, r"rank 0 of 3 died .*SIGKILL"),
    ],
)
def test_failures_name_the_rank_and_leave_no_process(fn, message):
    before = set(_children())
    with pytest.raises(LaunchError, match=message):
        launch(fn, 3, timeout_s=10)
    time.sleep(0.5)
    assert set(_children()) - before == set()


def _children() -> list[int]:
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out
