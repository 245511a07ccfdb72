"""Why is this job slow? Per rank and per step, where the time of each training step went, and the likely cause.

Input: one trace per rank (distlab.throughput.trace_read). Each `ProfilerStep#N` range (what torch.profiler's
`prof.step()` writes) is cut into disjoint pieces, each given to exactly one cause, so the causes add up to the step:

    GPU trace (kernels present)                     CPU trace (gloo: no kernels)
    compute      a compute kernel runs              a leaf operator runs on the training thread
    optimizer    ... inside Optimizer.step          ... inside Optimizer.step
    communication_exposed  only a NCCL kernel runs  a gloo/NCCL collective runs, the training thread does nothing
    data_loading the GPU idles, host in DataLoader  the training thread is inside DataLoader's __next__
    synchronisation  GPU idles, host in a sync call the training thread waits (synchronize, wait, barrier)
    launch_overhead  GPU idles for < SHORT_GAP_US   nothing runs for < SHORT_GAP_US (Python, dispatch, autograd)
    host_other   GPU idles for longer               nothing runs for longer (unprofiled code, a descheduled process)

On a CPU trace the training thread stands in for the GPU: its leaf operators are the "kernels" and the time between
them is the host's overhead, which is what a launch-bound GPU step waits on. Load from other processes on the
machine shows up as long gaps (a descheduled thread: host_other) and as stretched operators, not as a fault.

Across ranks (synchronous data parallelism: every step waits for the slowest rank inside a collective), a rank's
wait is its exposed communication plus synchronisation. What the network itself costs is the *least* wait of any
rank (the slowest rank does not wait for anyone); the spread of the waits is the straggler's excess.

Each cause gets a score, its share of the step (median over steps, so one descheduled step does not decide), and the
top cause is the largest; `healthy` scores the least compute share of any rank. Pure Python (runs in the browser).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

from distlab.throughput.trace_intervals import Ranges, clip, intersect, length, subtract, union
from distlab.throughput.trace_read import Trace

DEMOS = ("healthy", "slow-dataloader", "straggler", "exposed-allreduce", "launch-bound")
"""The faults `distlab trace --record-demo` injects, named as the causes the diagnosis reports."""
SHORT_GAP_US = 1000.0  # a gap shorter than a scheduler time slice (~ms) is the host's per-op cost, not preemption
STRETCH = 3.0  # an operator instance this many times its usual duration (plus a time slice) was descheduled
TINY_OP_US = 20.0  # a CPU operator shorter than one GPU kernel launch's host cost (5-20 µs) is all overhead
COMM_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:", "c10d::")
CAUSE_KEYS = (
    "compute",
    "optimizer",
    "communication_exposed",
    "data_loading",
    "synchronisation",
    "launch_overhead",
    "host_other",
)
BASE = "10-throughput-debugging/"
CAUSES = {  # id -> (what it means, what to do, where the book explains it)
    "healthy": (
        "compute-bound: every rank spends most of the step computing",
        "no fault in the step's shape; speed up the dominant kernels (fusion, FlashAttention, a better layout)",
        BASE + "#1-profile-a-step",
    ),
    "slow-dataloader": (
        "the step waits for its input batch",
        "more DataLoader workers (num_workers), pin_memory, prefetch, pre-tokenised data",
        BASE + "#2-is-the-input-pipeline-starving-the-model",
    ),
    "exposed-allreduce": (
        "communication that nothing overlaps (every rank waits for the collective)",
        "overlap it (DDP buckets, FSDP prefetch), fewer or larger messages, check the link (NCCL_DEBUG, nccl-tests)",
        BASE + "#3-is-communication-hidden",
    ),
    "launch-bound": (
        "the host's per-operator cost: the device idles between many short operators",
        "larger operators per launch: bigger micro-batch, fusion (torch.compile), CUDA graphs",
        BASE + "#4-is-the-cpu-keeping-up-launch-bound-steps-and-host-syncs",
    ),
    "synchronisation": (
        "the host blocks on the device or on other ranks (synchronize, .item(), barriers)",
        "remove per-step syncs (.item(), print(loss), .cpu()); log every N steps",
        BASE + "#4-is-the-cpu-keeping-up-launch-bound-steps-and-host-syncs",
    ),
    "straggler": (
        "one rank computes longer and the others wait for it in the collective",
        "find what differs on that rank: its GPU clocks, its data, its node's other processes",
        BASE + "#5-stragglers-every-step-waits-for-the-slowest-rank",
    ),
    "optimizer": (
        "the optimizer step is a large part of the step",
        "a fused/foreach optimizer, or shard its state (ZeRO) so each rank updates less",
        "06-sharded-data-parallel/",
    ),
    "host-other": (
        "long stretches with nothing profiled running: unprofiled code, or the process was not scheduled",
        "profile with with_stack=True; check for other processes on the node (CPU oversubscription)",
        BASE + "#1-profile-a-step",
    ),
}


FAULT_SHARE = 0.5  # a fault is the top cause when it takes at least this share of the recorded step; else healthy
NOT_A_FAULT = ("healthy", "host-other")
"""Time with nothing recorded running is what the trace cannot explain (on a loaded machine, mostly the process not
being scheduled): it is reported, and the causes are shares of the rest, but it is never named the cause."""


def _top_cause(causes: list[dict]) -> str:
    """The largest fault if it takes FAULT_SHARE of the step; otherwise the step is healthy (compute-bound)."""
    faults = [c for c in causes if c["cause"] not in NOT_A_FAULT and c["measurable"]]
    return faults[0]["cause"] if faults and faults[0]["share_of_step"] >= FAULT_SHARE else "healthy"


class DiagnosisError(ValueError):
    """Traces that cannot be diagnosed together (no steps, mismatched ranks): one line, exit 2."""


def _is_comm(name: str, cat: str, gpu: bool) -> bool:
    """A collective: on a GPU trace an NCCL kernel, or a gloo collective's host range (gloo on CUDA tensors runs on
    the host: several ranks sharing one GPU); on a CPU trace a gloo/NCCL/MPI range (not c10d's enqueue op)."""
    if gpu:
        return (cat == "kernel" and "nccl" in name.lower()) or (
            cat in ("cpu_op", "user_annotation") and name.startswith("gloo:")
        )
    return cat in ("cpu_op", "user_annotation") and name.startswith(COMM_PREFIXES) and not name.startswith("c10d::")


def _is_sync(name: str) -> bool:
    n = name.lower()
    return "synchronize" in n or n.endswith("::wait") or "barrier" in n


def _is_data(name: str) -> bool:
    return name.startswith("enumerate(DataLoader)") or name.lower() in ("data", "dataloader", "data_loading")


def _is_optimizer(name: str) -> bool:
    return name.startswith("Optimizer.step#") or name.lower() == "optimizer"


def _is_cpu_kernel(name: str) -> bool:
    """An operator that does the work (ATen or another library's op), not autograd's or the framework's wrapper."""
    return (
        "::" in name
        and not name.startswith(("autograd::", "torch::autograd::", "torch.distributed.ddp"))
        and not name.startswith(COMM_PREFIXES)
        and not _is_sync(name)
    )


def _unstretched(ops: list[tuple[float, float, str]]) -> tuple[list[tuple[float, float, str]], Ranges]:
    """Operators cut back to their usual duration where they ran far longer than usual: an operator that takes
    STRETCH x its name's median and SHORT_GAP_US more was, for the excess, descheduled (another process had the
    core); the excess becomes unrecorded time (host_other) instead of compute. How load from other processes looks
    in a CPU trace: the same operator, the same shapes, a few instances many times slower. Returns the operators
    and the excess ranges (where no operator ran its usual course)."""
    durations: dict[str, list[float]] = defaultdict(list)
    for a, b, n in ops:
        durations[n].append(b - a)
    median = {n: statistics.median(d) for n, d in durations.items()}
    out, excess = [], []
    for a, b, n in ops:
        usual = median[n]
        if b - a > STRETCH * usual + SHORT_GAP_US:
            out.append((a, a + usual, n))
            excess.append((a + usual, b))
        else:
            out.append((a, b, n))
    return out, subtract(union(excess), union((a, b) for a, b, _ in out))


def _self_times(ops: list[tuple[float, float, str]]) -> list[tuple[str, float, float]]:
    """(name, start, self time) of nested ranges: each op's duration less its children's (a stack walk)."""
    out: list[tuple[str, float, float]] = []
    stack: list[list] = []  # [end, name, start, self]
    for a, b, n in sorted(ops, key=lambda x: (x[0], -x[1])):
        while stack and stack[-1][0] <= a:
            end, name, start, own = stack.pop()
            out.append((name, start, own))
        if stack:
            stack[-1][3] -= min(b, stack[-1][0]) - a
        stack.append([b, n, a, b - a])
    out += [(name, start, own) for _, name, start, own in stack]
    return out


class RankView:
    """One rank's trace sorted into the ranges a breakdown needs (built once; steps are windows into it)."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.gpu = any(cat == "kernel" for _, _, cat, _, _ in trace.events)
        steps = [(e[3], e[0], e[1], e[4]) for e in trace.events if e[3].startswith("ProfilerStep#")]
        self.steps: dict[int, tuple[float, float]] = {}
        for name, start, end, _ in steps:
            try:
                self.steps[int(name.split("#", 1)[1])] = (start, end)
            except ValueError:
                continue
        main = Counter(thread for *_, thread in steps).most_common(1)
        self.main = main[0][0] if main else None
        on_main = [e for e in trace.events if e[4] == self.main]
        self.data = union((a, b) for a, b, _, n, _ in on_main if _is_data(n))
        self.sync = union((a, b) for a, b, c, n, _ in on_main if c in ("cpu_op", "cuda_runtime") and _is_sync(n))
        gpu_side = [e for e in trace.events if e[2] == "gpu_user_annotation"] if self.gpu else on_main
        self.optimizer = union((a, b) for a, b, _, n, _ in gpu_side if _is_optimizer(n))
        self.comm = union((a, b) for a, b, c, n, _ in trace.events if _is_comm(n, c, self.gpu))
        self.has_data = bool(self.data)
        self.has_optimizer = bool(self.optimizer)
        self.stretched: Ranges = []
        if self.gpu:
            if not self.optimizer:  # no GPU-side annotation: the host's range is the best available
                self.optimizer = union((a, b) for a, b, _, n, _ in on_main if _is_optimizer(n))
            work = [e for e in trace.events if e[2] in ("kernel", "gpu_memcpy", "gpu_memset")]
            self.compute = union((a, b) for a, b, c, n, _ in work if not _is_comm(n, c, True))
            self.ops = [(n, a, b - a) for a, b, c, n, _ in work if not _is_comm(n, c, True)]
        else:
            kernels = [(a, b, n) for a, b, c, n, _ in on_main if c == "cpu_op" and _is_cpu_kernel(n)]
            kernels, self.stretched = _unstretched(kernels)
            self.compute = union((a, b) for a, b, _ in kernels if b - a >= TINY_OP_US)
            self.any_op = union((a, b) for a, b, _ in kernels)
            self.ops = _self_times(kernels)

    def pieces(self, step: int) -> dict[str, Ranges]:
        """The step cut into disjoint ranges, one list per cause (µs): together they cover the step exactly."""
        lo, hi = self.steps[step]
        window: Ranges = [(lo, hi)]
        compute = clip(self.compute, lo, hi)
        comm = clip(self.comm, lo, hi)
        opt = clip(self.optimizer, lo, hi)
        out: dict[str, Ranges] = {k: [] for k in CAUSE_KEYS}
        if self.gpu:
            out["optimizer"] = intersect(compute, opt)
            out["compute"] = subtract(compute, opt)
            out["communication_exposed"] = subtract(comm, compute)
            idle = subtract(window, union(compute + comm))
            out["data_loading"] = intersect(idle, clip(self.data, lo, hi))
            out["synchronisation"] = intersect(subtract(idle, out["data_loading"]), clip(self.sync, lo, hi))
            rest = subtract(idle, union(out["data_loading"] + out["synchronisation"]))
        else:
            stretched = clip(self.stretched, lo, hi)  # descheduled inside an operator: unrecorded, not work
            out["host_other"] = list(stretched)
            data = out["data_loading"] = subtract(clip(self.data, lo, hi), stretched)
            sync = out["synchronisation"] = subtract(clip(self.sync, lo, hi), union(data + stretched))
            work = subtract(compute, union(data + sync + stretched))
            out["optimizer"] = intersect(work, opt)
            out["compute"] = subtract(work, opt)
            rest = subtract(window, union(data + sync + work + stretched))
            out["communication_exposed"] = intersect(rest, comm)
            rest = subtract(rest, out["communication_exposed"])
            out["launch_overhead"] = intersect(rest, clip(self.any_op, lo, hi))  # operators too short to be work
            rest = subtract(rest, out["launch_overhead"])
        for a, b in rest:
            out["launch_overhead" if b - a < SHORT_GAP_US else "host_other"].append((a, b))
        return {k: union(v) for k, v in out.items()}

    def breakdown(self, step: int) -> dict:
        """Seconds of the step by cause (they add up to the step), and the communication figures."""
        lo, hi = self.steps[step]
        compute, comm = clip(self.compute, lo, hi), clip(self.comm, lo, hi)
        seconds = {k: length(v) * 1e-6 for k, v in self.pieces(step).items()}
        return {
            "step_s": (hi - lo) * 1e-6,
            "time_by_cause": seconds,
            "communication_s": length(comm) * 1e-6,
            "overlapped_communication_s": length(intersect(comm, compute)) * 1e-6,
            "gpu_idle_s": length(subtract([(lo, hi)], union(compute + comm))) * 1e-6 if self.gpu else None,
        }


def timeline(views: list[RankView], ranks: list[int], step: int) -> dict:
    """One step of every rank as drawable pieces: (rank, start s, end s, cause) from the step's start on rank 0,
    and each rank's communication (which may run under compute) as its own lane."""
    t0 = min(v.steps[step][0] for v in views)
    pieces, comm = [], []
    for v, r in zip(views, ranks):
        lo, hi = v.steps[step]
        for cause, ranges in v.pieces(step).items():
            pieces += [[r, (a - t0) * 1e-6, (b - t0) * 1e-6, cause] for a, b in ranges]
        comm += [[r, (a - t0) * 1e-6, (b - t0) * 1e-6] for a, b in clip(v.comm, lo, hi)]
    pieces.sort(key=lambda x: (x[0], x[1]))
    return {"step": step, "pieces": pieces, "communication": comm}


def _own_seconds(seconds: dict[str, float]) -> float:
    """What the rank itself did in the step: recorded work, not waits for others (communication, syncs) and not
    unrecorded time (host_other)."""
    return sum(seconds[k] for k in ("compute", "optimizer", "data_loading", "launch_overhead"))


def _step_scores(per_rank: list[dict[str, float]], step_s: list[float], straggler: int | None) -> dict[str, float]:
    """One step's score per cause, from each rank's seconds by cause. Every score is a share of *recorded* time
    (unrecorded time, mostly a descheduled process on a loaded machine, is left out), so another process's load
    does not dilute a fault, and each is taken where it is least ambiguous:

    - a cause inside one rank (its data, its launches, its optimizer): share of that rank's own time, mean of ranks;
    - exposed communication and synchronisation: share of the rank's recorded time, the *least* of any rank (the
      straggler does not wait for anyone, so its wait is what the collective itself costs);
    - straggler: how much more the slowest rank did than the others (median), as a share of what it did;
    - healthy: the least compute share of recorded time of any rank."""
    own = [_own_seconds(t) for t in per_rank]
    recorded = [o + t["communication_exposed"] + t["synchronisation"] for o, t in zip(own, per_rank)]

    def share(x: float, of: float) -> float:
        return x / of if of > 0 else 0.0

    out = {
        "slow-dataloader": statistics.fmean(share(t["data_loading"], o) for t, o in zip(per_rank, own)),
        "launch-bound": statistics.fmean(share(t["launch_overhead"], o) for t, o in zip(per_rank, own)),
        "optimizer": statistics.fmean(share(t["optimizer"], o) for t, o in zip(per_rank, own)),
        "exposed-allreduce": min(share(t["communication_exposed"], r) for t, r in zip(per_rank, recorded)),
        "synchronisation": min(share(t["synchronisation"], r) for t, r in zip(per_rank, recorded)),
        "host-other": statistics.fmean(share(t["host_other"], s) for t, s in zip(per_rank, step_s)),
        "healthy": min(share(t["compute"], r) for t, r in zip(per_rank, recorded)),
        "straggler": 0.0,
    }
    if straggler is not None:
        others = statistics.median(o for i, o in enumerate(own) if i != straggler)
        out["straggler"] = share(own[straggler] - others, own[straggler])
    return out


def _rank_of(view: RankView, index: int) -> int:
    return view.trace.rank if view.trace.rank is not None else index


def diagnose(traces: list[Trace], *, with_timeline: bool = False) -> dict:
    """The report `distlab trace` prints: per rank, per step, causes ranked, with what the traces lack; with
    `with_timeline`, the slowest step's pieces for drawing."""
    if not traces:
        raise DiagnosisError("no trace files given")
    views = [RankView(t) for t in traces]
    for v in views:
        if not v.steps:
            raise DiagnosisError(
                f"{v.trace.path}: no ProfilerStep#N ranges: record with torch.profiler's schedule and call "
                "prof.step() once per training step"
            )
    ranks = [_rank_of(v, i) for i, v in enumerate(views)]
    if len(set(ranks)) != len(ranks):
        raise DiagnosisError(f"two files claim the same rank ({ranks}): give one trace per rank of one job")
    worlds = {v.trace.world_size for v in views if v.trace.world_size is not None}
    if len(worlds) > 1:
        raise DiagnosisError(f"the traces come from jobs of different world sizes {sorted(worlds)}")
    if worlds and max(ranks) >= min(worlds):
        raise DiagnosisError(f"rank {max(ranks)} does not exist in a world of {min(worlds)} ranks")
    if len({v.gpu for v in views}) > 1:
        raise DiagnosisError("some traces have GPU kernels and some do not: traces of different jobs?")
    common = sorted(set.intersection(*(set(v.steps) for v in views)))
    if not common:
        raise DiagnosisError("the ranks' traces share no ProfilerStep number: traces of different runs?")
    order = sorted(range(len(views)), key=lambda i: ranks[i])
    views, ranks = [views[i] for i in order], [ranks[i] for i in order]
    per = {s: [v.breakdown(s) for v in views] for s in common}
    gpu = views[0].gpu

    def mean(xs):
        return sum(xs) / len(xs)

    rank_rows = []
    for i, (v, r) in enumerate(zip(views, ranks)):
        rows = [per[s][i] for s in common]
        causes = {k: mean([x["time_by_cause"][k] for x in rows]) for k in CAUSE_KEYS}
        step_s = mean([x["step_s"] for x in rows])
        rank_rows.append(
            {
                "rank": r,
                "file": v.trace.path,
                "steps": len(rows),
                "step_s": step_s,
                "busy_s": mean([_own_seconds(x["time_by_cause"]) for x in rows]),
                "time_by_cause": causes,
                "exposed_communication_s": causes["communication_exposed"],
                "communication_s": mean([x["communication_s"] for x in rows]),
                "overlapped_communication_s": mean([x["overlapped_communication_s"] for x in rows]),
                "gpu_idle_s": mean([x["gpu_idle_s"] for x in rows]) if gpu else None,
            }
        )
    busy_mean = [row["busy_s"] for row in rank_rows]
    straggler = max(range(len(ranks)), key=lambda i: busy_mean[i]) if len(ranks) > 1 else None
    step_rows = []
    scores: dict[str, list[float]] = defaultdict(list)
    for s in common:
        rows = per[s]
        own = [_own_seconds(x["time_by_cause"]) for x in rows]
        for k, v in _step_scores([x["time_by_cause"] for x in rows], [x["step_s"] for x in rows], straggler).items():
            scores[k].append(v)
        slowest = max(range(len(rows)), key=lambda i: own[i])
        step_rows.append(
            {
                "step": s,
                "slowest_rank": ranks[slowest],
                "spread_s": max(own) - min(own),
                "ranks": [
                    {"rank": r, "step_s": x["step_s"], "time_by_cause": x["time_by_cause"]} for r, x in zip(ranks, rows)
                ],
            }
        )
    ranked = sorted(((max(0.0, statistics.median(v)), k) for k, v in scores.items()), reverse=True)
    missing = _missing(views, gpu)
    unmeasurable = {m["cause"] for m in missing}
    causes = [
        {
            "cause": k,
            "share_of_step": score,
            "means": CAUSES[k][0],
            "what_to_do": CAUSES[k][1],
            "chapter": CAUSES[k][2],
            "measurable": k not in unmeasurable,
        }
        for score, k in ranked
    ]
    others = [b for i, b in enumerate(busy_mean) if i != straggler]
    report = {
        "device": "cuda" if gpu else "cpu",
        "ranks": rank_rows,
        "steps": step_rows,
        "time_by_cause": {k: mean([row["time_by_cause"][k] for row in rank_rows]) for k in CAUSE_KEYS},
        "step_s": mean([row["step_s"] for row in rank_rows]),
        "exposed_communication_s": mean([row["exposed_communication_s"] for row in rank_rows]),
        "straggler_rank": ranks[straggler] if straggler is not None else None,
        "straggler_excess_s": busy_mean[straggler] - statistics.median(others) if straggler is not None else None,
        "top_cause": _top_cause(causes),
        "unattributed_share": statistics.median(scores["host-other"]),
        "causes": causes,
        "dominant_ops": _dominant(views, common),
        "missing": missing,
    }
    if with_timeline:
        slowest = max(step_rows, key=lambda row: max(x["step_s"] for x in row["ranks"]))["step"]
        report["timeline"] = timeline(views, ranks, slowest)
    return report


def _dominant(views: list[RankView], common: list[int], top: int = 8) -> list[dict]:
    """Kernels (GPU) or leaf operators (CPU) by time inside the common steps, per step and rank."""
    total: Counter = Counter()
    calls: Counter = Counter()
    for v in views:
        windows = union(v.steps[s] for s in common)
        for name, a, dur in v.ops:
            if any(lo <= a < hi for lo, hi in windows):
                total[name] += dur
                calls[name] += 1
    n = len(views) * len(common)
    step_us = sum(sum(hi - lo for lo, hi in (v.steps[s] for s in common)) for v in views) / n
    return [
        {"name": name, "seconds_per_step": us * 1e-6 / n, "calls_per_step": calls[name] / n, "share": us / n / step_us}
        for name, us in total.most_common(top)
    ]


def _missing(views: list[RankView], gpu: bool) -> list[dict]:
    """What the traces cannot tell, so the report says so instead of guessing."""
    out = []
    if not all(v.has_data for v in views):
        out.append(
            {
                "cause": "slow-dataloader",
                "why": "no DataLoader ranges (enumerate(DataLoader)#...) on some rank: a custom loader not wrapped in "
                "record_function('data'); time spent loading shows as host time instead",
            }
        )
    if len(views) < 2:
        out.append({"cause": "straggler", "why": "one rank's trace: stragglers need every rank's trace of one step"})
    if len(views) > 1 and not any(v.comm for v in views):
        out.append(
            {
                "cause": "exposed-allreduce",
                "why": "no collective events (gloo:/nccl: ranges or NCCL kernels): exposed communication is unknown",
            }
        )
    if not all(v.has_optimizer for v in views):
        out.append({"cause": "optimizer", "why": "no Optimizer.step ranges: optimizer time counts as compute"})
    if not gpu:
        out.append(
            {
                "cause": "gpu-idle",
                "why": "a CPU trace (no GPU kernels): GPU idle time does not exist; the training thread's leaf "
                "operators stand for the kernels",
            }
        )
    return out
