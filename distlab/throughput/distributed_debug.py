"""distributed-debug: TORCH_DISTRIBUTED_DEBUG=DETAIL and monitored_barrier on real gloo processes.

Two on-call tools that name the guilty rank where a timeout names nobody (collective-hang):

1. **TORCH_DISTRIBUTED_DEBUG=DETAIL** wraps every process group in a ProcessGroupWrapper that, before each
   collective, all-gathers a fingerprint of it (sequence number, op type, tensor shapes, dtypes, devices) on a
   helper gloo group and raises on the first difference. The planted bug: two ranks all-reduce tensors of
   different sizes (a model that differs across ranks, a bucket built from different parameters). Without DETAIL
   gloo's transport aborts the process ("Received data size doesn't match expected size") without naming the
   collective; with it every rank raises at once, naming both ranks' collectives and the field that differs. It
   costs an extra all-gather per collective: a debugging setting, not a production one. Set it before the group
   is created (here `dist.set_debug_level`, the same as the environment variable at start-up).
2. **monitored_barrier** (gloo only; CPU tensors, any job: create a gloo group beside NCCL): rank 0 waits for
   every rank with a timeout and, with `wait_all_ranks=True`, names every rank that did not arrive. The planted
   bug: one rank is stuck elsewhere (here asleep) while the others reach the barrier.

Both run on gloo whatever the device: they debug the control flow, not the kernels.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.runtime.launcher import LaunchError, launch

SIZES = (8, 4)  # the elements each of the two ranks all-reduces: the mismatch
GROUP_TIMEOUT_S = 5.0
WORLD, ABSENT = 3, 2  # monitored_barrier: rank ABSENT never arrives
BARRIER_TIMEOUT_S = 1.0


def mismatched_all_reduce(rank: int, world: int, detail: bool) -> dict:
    """Rank r all-reduces SIZES[r] elements on a fresh group, with DETAIL on or off while the group is made."""
    if detail:
        dist.set_debug_level(dist.DebugLevel.DETAIL)
    group = dist.new_group(list(range(world)), timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    dist.set_debug_level(dist.DebugLevel.OFF)  # the group keeps its wrapper; later groups are plain
    t = torch.ones(SIZES[rank])
    start, error = time.perf_counter(), None
    try:
        dist.all_reduce(t, group=group)
    except RuntimeError as exc:
        error = " ".join(str(exc).split())
    return {"error": error, "seconds": time.perf_counter() - start}


def absent_rank(rank: int, world: int, absent: int) -> dict:
    """Every rank but `absent` enters monitored_barrier; `absent` is busy elsewhere past the barrier's timeout."""
    group = dist.new_group(list(range(world)), backend="gloo")
    start, error = time.perf_counter(), None
    if rank == absent:
        time.sleep(BARRIER_TIMEOUT_S * 1.5)
    else:
        try:
            dist.monitored_barrier(group=group, timeout=timedelta(seconds=BARRIER_TIMEOUT_S), wait_all_ranks=True)
        except RuntimeError as exc:
            error = " ".join(str(exc).split())
    return {"error": error, "seconds": time.perf_counter() - start}


def named_ranks(message: str) -> list[int]:
    """The ranks monitored_barrier's message says failed to pass ("Ranks 2, 3 failed to pass ...")."""
    m = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", message or "")
    return sorted(int(x) for x in m.group(1).replace(",", " ").split()) if m else []


@experiment(
    "distributed-debug",
    "TORCH_DISTRIBUTED_DEBUG=DETAIL on a mismatched all-reduce and monitored_barrier on an absent rank, on real "
    "gloo processes: what each reports",
)
def distributed_debug(device: str) -> Result:
    r = Result("distributed-debug")
    detail = launch(mismatched_all_reduce, 2, True, device="cpu", backend="gloo", timeout_s=60)
    try:
        launch(mismatched_all_reduce, 2, False, device="cpu", backend="gloo", timeout_s=60)
        plain = "returned (no error)"
        crashed = False
    except LaunchError as exc:
        plain = " ".join(str(exc).split())
        crashed = True
    r.claim("without DETAIL the mismatch kills a rank: no rank returns a result", crashed, True)
    rows = [["TORCH_DISTRIBUTED_DEBUG off", "the launcher", _short(plain, 160)]]
    for rank, x in enumerate(detail):
        brief = re.sub(r", TensorDeviceTypes=TensorOptions\(.*?memory_format=\(nullopt\)\)", "", x["error"] or "")
        rows.append([f"DETAIL, rank {rank}", f"{x['seconds'] * 1e3:.0f} ms", _short(brief, 400)])
        err = x["error"] or ""
        r.claim(
            f"DETAIL, rank {rank}: raises 'Detected mismatch between collectives'", "Detected mismatch" in err, True
        )
        shapes = [int(s) for s in re.findall(r"TensorShape=\[(\d+)\]", err)]
        shapes += [-1, -1]  # a message without shapes fails both claims below
        r.claim(f"DETAIL, rank {rank}: names its own tensor shape first", shapes[0], SIZES[rank])
        r.claim(f"DETAIL, rank {rank}: then its peer's", shapes[1], SIZES[1 - rank])
        r.claim(
            f"DETAIL, rank {rank}: raises before the group's timeout",
            x["seconds"],
            GROUP_TIMEOUT_S,
            relation="<=",
            unit="s",
            kind="timing",
            formula="one fingerprint all-gather on localhost: milliseconds",
        )
    r.table(
        "detail",
        ["run", "time to the error", "what it reports"],
        rows,
        caption=f"Two gloo ranks all-reduce {SIZES[0]} and {SIZES[1]} elements on a group with a "
        f"{GROUP_TIMEOUT_S:g} s timeout.",
    )
    r.add("detail_ms", max(x["seconds"] for x in detail) * 1e3, "ms", "DETAIL: slowest rank's time to the error")
    r.add("group_timeout_s", GROUP_TIMEOUT_S, "s", "the group's timeout")
    barrier = launch(absent_rank, WORLD, ABSENT, device="cpu", backend="gloo", timeout_s=60)
    # waits to a tenth of a second: the 1 s timeout plus tens of milliseconds of scheduling, which vary run to run
    rows = [
        [rank, "busy elsewhere" if rank == ABSENT else f"{x['seconds']:.1f} s", _short(x["error"] or "—", 200)]
        for rank, x in enumerate(barrier)
    ]
    r.table(
        "barrier",
        ["rank", "waited", "what monitored_barrier raised"],
        rows,
        caption=f"{WORLD} gloo ranks, rank {ABSENT} never arrives; timeout {BARRIER_TIMEOUT_S:g} s, "
        "wait_all_ranks=True.",
    )
    named = named_ranks(barrier[0]["error"])
    r.claim("monitored_barrier on rank 0 names exactly one rank", len(named), 1)
    r.claim("... the absent one", named[0] if named else -1, ABSENT)
    r.claim(
        "rank 0 raises after the barrier's timeout, not before",
        barrier[0]["seconds"],
        BARRIER_TIMEOUT_S,
        relation=">=",
        unit="s",
        kind="timing",
    )
    r.add("barrier_timeout_s", BARRIER_TIMEOUT_S, "s", "monitored_barrier timeout")
    r.add("absent", ABSENT, "", "the rank that never arrives")
    r.add("world", WORLD, "ranks", "ranks in the barrier run")
    return r


def _short(text: str, n: int) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= n else text[: n - 1] + "…"
