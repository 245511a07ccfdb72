"""collective-hang: a rank that skips one collective, on real gloo processes, and the three ways to find it.

The planted bug: every rank all-reduces its gradients once per step on a training group; rank CULPRIT skips the
all-reduce of step SKIP_STEP (the kind of data-dependent `if` that does it in real code: an empty batch, a rank that
thinks it has no gradients) and carries on. The collectives after it still match one-for-one with its peers' (a
collective is matched by its sequence number, not by the step it belongs to), so nothing fails until the peers'
last all-reduce finds no partner, while the culprit has moved on to the final barrier on another group. Then:

1. **What the timeout reports.** With a short timeout on the training group, the victims' all-reduce raises gloo's
   timeout ("Timed out waiting ... for recv/send operation"): it names the operation that waited, not the rank that
   is missing. On NCCL the watchdog reports the same (WorkNCCL with its SeqNum, after the group's timeout, 10 min by
   default), also without the missing rank.
2. **Every rank's stack** (distlab.runtime.launcher's hang detection: faulthandler in every rank, read after the
   deadline). Every rank waits inside a collective, so "the rank that is not in one" finds nothing; the rank whose
   stack stops at a different line from all the others (the barrier, not the all-reduce) is the culprit.
3. **PyTorch's flight recorder** (TORCH_NCCL_TRACE_BUFFER_SIZE > 0; on torch >= 2.7 it also records gloo): each rank
   keeps its last collectives with a per-group `collective_seq_id`. The first sequence number of a group that some
   of its ranks never enqueued names them. This is what `torchfrtrace` does on NCCL dumps (its analyser needs the
   process-group config NCCL writes; gloo's dump leaves pg_config empty, so the matching is done here).

GPU-only: TORCH_NCCL_DUMP_ON_TIMEOUT (the NCCL watchdog writes the dumps itself; here each rank dumps in its except
block), the entries' `state` beyond "scheduled" and their `time_discovered_*` (gloo records no CUDA events).
"""

from __future__ import annotations

import inspect
import linecache
import os
import pickle
import re
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.runtime.launcher import LaunchError, launch

WORLD, CULPRIT, STEPS, SKIP_STEP = 3, 2, 5, 2
GROUP_TIMEOUT_S = 1.0  # the training group's collective timeout in the first run (NCCL's default is 10 min)
# The launcher's deadline in the second run, where nothing times out by itself. The ranks must have reached the hang
# before it: fn first builds two gloo groups (each a full-mesh connect, seconds at load 20-30 on 2 cores, like the
# launcher's own start-up), then 4 all-reduces of 32 B (microseconds). At 2 s a loaded machine blamed rank 0, still
# connecting its group; 20 s is twice the slowest start-up seen.
HANG_DEADLINE_S = 20.0
# The flight recorder's buffer; torch 2.13 still reads TORCH_NCCL_TRACE_BUFFER_SIZE but warns that it is deprecated.
TRACE_ENV = "TORCH_FR_BUFFER_SIZE"
TRACE_ENTRIES = 64


def skipped_collective(
    rank: int, world: int, culprit: int, steps: int, skip_step: int, group_timeout_s: float, dump_dir: str
) -> dict:
    """A training loop whose rank `culprit` skips the all-reduce of step `skip_step`. Returns what this rank saw;
    writes its flight-recorder dump to dump_dir/nccl_trace_rank_<rank> (as TORCH_NCCL_DEBUG_INFO_TEMP_FILE would)."""
    train = dist.new_group(list(range(world)), timeout=timedelta(seconds=group_timeout_s))
    epoch = dist.new_group(list(range(world)), timeout=timedelta(seconds=group_timeout_s))
    grad = torch.full((8,), float(rank))
    error, start = None, time.perf_counter()
    try:
        for step in range(steps):
            if rank == culprit and step == skip_step:
                continue  # the planted bug
            dist.all_reduce(grad, group=train)
        dist.barrier(group=epoch)  # the end of the epoch, on another group
    except RuntimeError as exc:
        error = str(exc).strip().splitlines()[0]
    waited = time.perf_counter() - start
    with open(os.path.join(dump_dir, f"nccl_trace_rank_{rank}"), "wb") as f:
        # without the stack of every entry: symbolizing it takes seconds per dump, and run 2's stacks show the lines
        f.write(torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False))
    return {"error": error, "waited_s": waited}


def source_lines(fn=skipped_collective) -> dict[str, int]:
    """Line numbers of the all-reduce and the barrier in the rank function, read from its source."""
    lines, first = inspect.getsourcelines(fn)
    out = {}
    for i, text in enumerate(lines):
        if "dist.all_reduce(" in text:
            out["all_reduce"] = first + i
        if "dist.barrier(group=" in text:
            out["barrier"] = first + i
    return out


# ---------------------------------------------------------------- reading flight-recorder dumps
def load_dumps(folder: str) -> dict[int, dict]:
    """rank -> its unpickled dump, from files named <prefix>_<rank>."""
    out = {}
    for name in os.listdir(folder):
        m = re.search(r"_(\d+)$", name)
        if m:
            with open(os.path.join(folder, name), "rb") as f:
                out[int(m.group(1))] = pickle.load(f)
    return out


def diverged(dumps: dict[int, dict]) -> list[dict]:
    """Per process group, the first collective_seq_id not every member enqueued, and which ranks lack it.

    A group's members are the ranks its pg_config lists, or every rank that dumped when it lists none (gloo's dump
    leaves pg_config empty; every group here spans the world). Point-to-point entries (is_p2p) have their own
    sequence and are skipped."""
    seqs: dict[str, dict[int, set[int]]] = {}
    ops: dict[tuple[str, int], str] = {}
    for rank, dump in dumps.items():
        for e in dump.get("entries", []):
            if e.get("is_p2p"):
                continue
            pg = str(e["pg_id"])
            seqs.setdefault(pg, {}).setdefault(rank, set()).add(e["collective_seq_id"])
            ops[pg, e["collective_seq_id"]] = e["profiling_name"]
    out = []
    for pg, per_rank in sorted(seqs.items()):
        members = _members(dumps, pg) or sorted(dumps)
        for seq in sorted(set().union(*per_rank.values())):
            missing = [r for r in members if seq not in per_rank.get(r, set())]
            if missing:
                joined = [r for r in members if r not in missing]
                out.append({"pg": pg, "seq": seq, "op": ops[pg, seq], "missing": missing, "joined": joined})
                break
    return out


def _members(dumps: dict[int, dict], pg: str) -> list[int]:
    """The ranks a dump's pg_config lists for group `pg` (NCCL writes them; gloo leaves '[]')."""
    for dump in dumps.values():
        for key, cfg in dump.get("pg_config", {}).items():
            if key == pg and cfg.get("ranks", "[]") not in ("[]", ""):
                return sorted(int(x) for x in re.findall(r"\d+", str(cfg["ranks"])))
    return []


def last_enqueued(dump: dict, pg: str) -> int:
    """pg_status' last_enqueued_collective of one rank for one group (-1 when the rank never used it)."""
    return int(dump.get("pg_status", {}).get(pg, {}).get("last_enqueued_collective", -1))


# ---------------------------------------------------------------- the experiment
@experiment(
    "collective-hang",
    "a rank that skips one all-reduce on real gloo processes: what the timeout says, every rank's stack, "
    "and the flight recorder's sequence numbers that name it",
)
def collective_hang(device: str) -> Result:
    r = Result("collective-hang")
    lines = source_lines()
    r.add("world", WORLD, "ranks", "ranks")
    r.add("culprit", CULPRIT, "", "the rank that skips a collective")
    r.add("steps", STEPS, "", "training steps (one all-reduce each)")
    r.add("skip_step", SKIP_STEP, "", "the step whose all-reduce the culprit skips")
    r.add("group_timeout_s", GROUP_TIMEOUT_S, "s", "run 1: the training group's timeout")
    r.add("deadline_s", HANG_DEADLINE_S, "s", "run 2: the launcher's deadline")
    _timed_out(r, lines)
    _hung(r, lines)
    return r


def _with_trace(fn):
    """Run fn() with the flight recorder on in every rank launched meanwhile (the launcher passes the environment)."""
    old = os.environ.get(TRACE_ENV)
    os.environ[TRACE_ENV] = str(TRACE_ENTRIES)
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop(TRACE_ENV, None)
        else:
            os.environ[TRACE_ENV] = old


def _timed_out(r: Result, lines: dict[str, int]) -> None:
    with tempfile.TemporaryDirectory(prefix="distlab-fr-") as folder:
        args = (CULPRIT, STEPS, SKIP_STEP, GROUP_TIMEOUT_S, folder)
        seen = _with_trace(lambda: launch(skipped_collective, WORLD, *args, device="cpu", timeout_s=60))
        dumps = load_dumps(folder)
    rows = []
    for rank, s in enumerate(seen):
        role = "culprit" if rank == CULPRIT else "victim"
        rows.append([rank, role, f"`{_short(s['error'])}`" if s["error"] else "(no error)", f"{s['waited_s']:.2f} s"])
    r.table(
        "timeout",
        ["rank", "role", "what it reports", "time in the loop"],
        rows,
        caption=f"Run 1: the training group times out after {GROUP_TIMEOUT_S:g} s; each rank catches the error and "
        "dumps its flight recorder",
    )
    victims = [s for rank, s in enumerate(seen) if rank != CULPRIT]
    timed_out = sum("Timed out" in (s["error"] or "") for s in victims)
    r.claim(
        "every victim's error is the group's timeout",
        timed_out,
        WORLD - 1,
        formula="gloo: 'Timed out waiting ...ms for recv/send operation'",
    )
    r.claim(
        "no timeout message names the missing rank",
        sum(bool(re.search(rf"\brank {CULPRIT}\b", s["error"] or "")) for s in victims),
        0,
    )
    waited = max(s["waited_s"] for s in victims)
    r.add("victim_waited_s", waited, "s", "the longest a victim spent in its loop before the error")
    r.claim(
        "the victims fail after the group's timeout, not before and not much later",
        waited,
        GROUP_TIMEOUT_S,
        relation=">=",
        unit="s",
        kind="timing",
        formula="timeout <= time in the loop (4 all-reduces of 32 B are microseconds)",
    )
    r.claim(
        "... and within 3x the timeout",
        waited,
        3 * GROUP_TIMEOUT_S,
        relation="<=",
        unit="s",
        kind="timing",
    )
    found = diverged(dumps)
    train = next(d for d in found if "all_reduce" in d["op"])
    r.table(
        "diverged",
        ["process group", "first sequence number not every rank enqueued", "collective", "enqueued by", "missing"],
        [[d["pg"], d["seq"], d["op"], str(d["joined"]), str(d["missing"])] for d in found],
        caption="Run 1: the dumps matched by collective_seq_id, per group (what torchfrtrace does with NCCL dumps)",
    )
    r.add("fr_diverged_seq", train["seq"], "", "first training-group sequence number not every rank enqueued")
    r.claim(
        "the flight recorder's sequence numbers name one rank",
        len(train["missing"]),
        1,
        formula="ranks missing from the first collective_seq_id some rank of the group lacks",
    )
    r.claim("... and it is the culprit", train["missing"][0], CULPRIT)
    r.claim(
        "the culprit is missing from the last training all-reduce: seq = steps",
        train["seq"],
        STEPS,
        formula="its peers' last all-reduce finds no partner",
    )
    enq = {rank: last_enqueued(d, train["pg"]) for rank, d in dumps.items()}
    r.claim(
        "pg_status: the culprit enqueued one all-reduce fewer than its peers",
        min(v for k, v in enq.items() if k != CULPRIT) - enq[CULPRIT],
        1,
    )
    rows = []
    for rank in sorted(dumps):
        last = [e for e in dumps[rank]["entries"] if str(e["pg_id"]) == train["pg"]][-1]
        rows.append(
            [rank, enq[rank], last["collective_seq_id"], last["profiling_name"], last["state"], _yes(last["retired"])]
        )
    r.table(
        "flight",
        ["rank", "last_enqueued_collective", "last entry's collective_seq_id", "collective", "state", "retired"],
        rows,
        caption="Run 1: each rank's flight-recorder dump (format version "
        f"{next(iter(dumps.values()))['version']}, {TRACE_ENV}={TRACE_ENTRIES}), training group",
    )
    r.data["fr_version"] = next(iter(dumps.values()))["version"]
    r.claim(
        "on gloo every entry stays 'scheduled' (no GPU events mark start and completion)",
        sum(e["state"] != "scheduled" for d in dumps.values() for e in d["entries"]),
        0,
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _hung(r: Result, lines: dict[str, int]) -> None:
    args = (CULPRIT, STEPS, SKIP_STEP, 600.0, tempfile.gettempdir())  # no group timeout: it hangs
    try:
        launch(skipped_collective, WORLD, *args, device="cpu", timeout_s=HANG_DEADLINE_S)
        named, message, details = -1, "no hang", ""
    except LaunchError as exc:
        message, details = str(exc), exc.details
        named = int(re.match(r"rank (\d+) of", message).group(1))
    stacks = dict(re.findall(r"rank (\d+): (\S+:\d+) in", details))
    r.data["launcher_message"] = message
    rows = []
    for rank in range(WORLD):
        where = stacks.get(str(rank), "?")
        line = int(where.rsplit(":", 1)[1]) if ":" in where else 0
        code = linecache.getline(inspect.getsourcefile(skipped_collective), line).strip() if line else ""
        rows.append([rank, "culprit" if rank == CULPRIT else "victim", where, f"`{code}`"])
    r.table(
        "stacks",
        ["rank", "role", "its stack stops at", "the line"],
        rows,
        caption=f"Run 2: no collective timeout; after {HANG_DEADLINE_S:g} s the launcher dumps every rank's stack "
        f"(faulthandler) and reports: {_short(message)}",
    )
    r.claim(
        "the launcher names the culprit",
        named,
        CULPRIT,
        formula="every rank waits in a collective; the one at a line no other rank is at",
    )
    stopped = [int(stacks.get(str(k), "x:0").rsplit(":", 1)[1]) for k in range(WORLD)]
    expected = [lines["barrier"] if k == CULPRIT else lines["all_reduce"] for k in range(WORLD)]
    r.claim(
        "the culprit's stack stops at the barrier, every victim's at the all-reduce",
        sum(a != b for a, b in zip(stopped, expected)),
        0,
        formula="ranks whose stack line differs from the rank function's source",
    )


def _short(text: str) -> str:
    """A message without gloo's source path prefix, cut to its first sentence."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", text or "")
    return text.split(". ")[0]
