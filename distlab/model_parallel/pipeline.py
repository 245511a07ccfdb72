"""Pipeline-parallel schedules, simulated op by op: GPipe, 1F1B, interleaved 1F1B, zero-bubble ZB-H1 and ZB-V.

p stages (one per device), m micro-batches per step. Each device runs a fixed order of operations,
F (forward of one micro-batch through its layers) and B (its backward); ZB-H1 splits B into B (input
gradient, needed by the previous stage) and W (weight gradient, needed by nobody until the optimizer).
An op starts when its device is free and its input has arrived: F(j) on stage s needs F(j) of stage
s-1, B(j) on stage s needs B(j) of stage s+1, each plus a point-to-point time. Every start time is a
longest path through that graph, so the bubble is *measured* from the timeline:

    bubble fraction = idle time / step time,  closed form ((p-1)/v) / (m + (p-1)/v)

for GPipe and 1F1B (v = 1) and Megatron's interleaved schedule with v model chunks per device
(Narayanan et al. 2021, https://arxiv.org/abs/2104.04473, Section 2.2). 1F1B's point is memory: its
first stage holds p micro-batches of activations, GPipe's holds all m.

ZB-V (Qi et al., https://arxiv.org/abs/2401.10241, Section 6) gives each device two chunks placed in a V:
device d holds virtual stage d and virtual stage 2p-1-d, so the last device turns a micro-batch round on
itself and the first device both starts the forward and ends the backward. Splitting B and W as ZB-H1 does,
its steady state alternates the two chunks and its W ops fill both the fill and the drain.

Two simulators compute the same start times:

- `simulate_event_loop` (the naive one): each device runs as far as its inputs allow and parks on the op it
  waits for; finishing that op wakes it. One Python step per op.
- `simulate` (the fast one): the longest-path recurrence solved one *slot* at a time, where slot k holds the
  k-th F-or-B op of every device. Every schedule here sends an op's input from the same or an earlier slot,
  so slot k is, for all p devices at once, start = max(device free, input end + p2p) and end = start + op
  time: a few list operations per slot instead of Python steps per op. The few inputs that come from the
  same slot (a warm-up F's from the device before, a cool-down B's from the device after) are chained in
  device order. W ops need no input from another device: they only delay their device's next op. When a
  schedule breaks the slot property, `simulate` falls back to the event loop.

Pure Python (no numpy): the planner (distlab.planner) imports this module and must run where numpy does not
(the browser, under Pyodide).
"""

from __future__ import annotations

import functools
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate, chain, compress
from numbers import Integral
from operator import add, eq, gt, itemgetter

from distlab.core.cli import UsageError, command, emit, non_negative, parser, positive

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v")
SPLIT_BACKWARD = ("zb-h1", "zb-v")  # schedules that split the backward into B (input) and W (weight) ops
F, B, W = 0, 1, 2  # op kinds: forward, backward (input gradient for zb-h1), weight gradient (zb-h1 only)
KIND_NAMES = ("F", "B", "W")


# ---------------------------------------------------------------- closed forms
def bubble_fraction(stages: int, microbatches: int, virtual: int = 1) -> float:
    """Idle share of one step for GPipe, 1F1B (virtual=1) and interleaved 1F1B (virtual=v):
    each device idles (p-1)/v micro-batch-times of (forward + backward) while busy for m of them."""
    _check_sizes(stages, microbatches, virtual)
    idle = (stages - 1) / virtual
    return idle / (microbatches + idle)


def zb_h1_bubble_fraction(
    stages: int, microbatches: int, forward: float = 1.0, backward_input: float = 1.0, backward_weight: float = 1.0
) -> float:
    """ZB-H1's idle share (Qi et al. 2023, https://arxiv.org/abs/2401.10241, Section 3.1): the idle
    time per device is (p-1)(T_F + T_B - T_W) against 1F1B's (p-1)(T_F + T_B + T_W)."""
    _check_sizes(stages, microbatches, 1)
    idle = (stages - 1) * (forward + backward_input - backward_weight)
    return idle / (microbatches * (forward + backward_input + backward_weight) + idle)


def zb_v_bubble_fraction(stages: int, microbatches: int, forward: float = 1.0, backward: float = 2.0) -> float:
    """ZB-V's idle share of the whole step, for m >= 2p-1 and B = W = half the backward. The paper's claim
    (Qi et al., Section 6) is that with T_F = T_B = T_W no device idles between its first op and its last:
    each device is busy for exactly 2m chunk passes of F + B + W = m(forward + backward). What remains is
    the parallelogram's skew: device d starts d chunk forwards late, so the step is m(f + b) + (p-1) f/2."""
    _check_sizes(stages, microbatches, 1)
    skew = (stages - 1) * forward / 2
    return skew / (microbatches * (forward + backward) + skew)


def _check_sizes(stages: int, microbatches: int, virtual: int) -> None:
    for name, v in (("stages", stages), ("microbatches", microbatches), ("virtual", virtual)):
        if isinstance(v, bool) or not isinstance(v, Integral) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


# ---------------------------------------------------------------- schedules as op orders
def _check_schedule(schedule: str, p: int, m: int, v: int) -> None:
    _check_sizes(p, m, v)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    if schedule == "interleaved":
        if v < 2:
            raise ValueError("the interleaved schedule needs virtual >= 2 (virtual = 1 is plain 1f1b)")
        if m % p:
            raise ValueError(
                f"the interleaved schedule needs microbatches divisible by stages "
                f"({m} % {p} = {m % p}): micro-batches go round in groups of p"
            )
    elif schedule == "zb-v":
        if v != 2:
            raise ValueError(f"the zb-v schedule runs exactly two chunks per GPU (virtual=2), got virtual={v}")
    elif v != 1:
        raise ValueError(f"virtual stages apply only to the interleaved and zb-v schedules, not {schedule}")


def warmup_forwards(schedule: str, stages: int, microbatches: int, virtual: int, device: int) -> int:
    """F ops device d runs before its first B: all m (GPipe), p-1-d (1F1B, ZB-H1), or Megatron's interleaved
    warm-up 2(p-1-d) + (v-1)p chunk passes (capped by the m v it has)."""
    p, m, v = stages, microbatches, virtual
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":
        return min(2 * (p - 1 - device) + (v - 1) * p, m * v)
    return min(p - 1 - device, m)


def forward_sequence(stages: int, microbatches: int, virtual: int) -> tuple[list[int], list[int]]:
    """(micro-batch, chunk) of every device's k-th F: plainly 0..m-1 in chunk 0; interleaved, groups of p
    micro-batches visit chunk 0, 1, .., v-1 (Megatron). Backward visits the chunks in reverse: chunk v-1-c."""
    p, m, v = stages, microbatches, virtual
    if v == 1:
        return list(range(m)), [0] * m
    ks = range(m * v)
    return [(k // (p * v)) * p + k % p for k in ks], [(k // p) % v for k in ks]


def _zb_h1_kinds(p: int, m: int, d: int) -> list[int]:
    """ZB-H1 on device d: 1F1B's order of F and B, with the device holding back d of its W ops so that they fill
    the gap at the end of the step, where the last Bs ripple back to stage 0 (the paper's Figure 3, top). Its
    j-th B (0-based) is followed by a W from j = d on, and the d held-back Ws close the step. A micro-batch's
    activations live until its W, so every stage holds at most p of them, as 1F1B's first stage does."""
    w = min(p - 1 - d, m)
    steady = m - w  # micro-batches whose B is preceded by a steady-state F
    out = [F] * w
    bounds = sorted({0, steady, min(d, m), m})
    for lo, hi in zip(bounds, bounds[1:]):  # micro-batches j in [lo, hi): F if j < steady, B, W if j >= d
        out += (([F] if lo < steady else []) + [B] + ([W] if lo >= d else [])) * (hi - lo)
    return out + [W] * min(d, m)


def virtual_stage(schedule: str, chunk: int, device: int, stages: int) -> int:
    """Which slice of the layers chunk c of device d holds: c p + d (interleaved: round robin), or the V of
    zb-v, where chunk 1 of device d is virtual stage 2p-1-d."""
    if schedule == "zb-v" and chunk == 1:
        return 2 * stages - 1 - device
    return chunk * stages + device


def _zb_v_order(p: int, m: int, d: int) -> tuple[list[int], list[int], list[int]]:
    """ZB-V on device d (the paper's Figure 8; the same order as PyTorch's ScheduleZBVZeroBubble): 2(p-d)-1
    forwards of chunk 0, then d pairs (chunk 1, chunk 0), then p-d rounds of F B W on chunk 1; the steady
    state alternates F B W on chunk 0 and on chunk 1; the cool-down runs the remaining Bs (chunk 0 and 1 in
    turn, then chunk 0 with its W) and closes with the Ws held back. Built for max(m, 2p-1) micro-batches;
    the ops of micro-batches >= m are dropped, as PyTorch does when m is small."""
    n = max(m, 2 * p - 1)
    ops: list[tuple[int, int, int]] = []  # (kind, chunk, micro-batch)
    count = {(k, c): 0 for k in (F, B, W) for c in (0, 1)}

    def op(kind: int, chunk: int) -> None:
        ops.append((kind, chunk, count[(kind, chunk)]))
        count[(kind, chunk)] += 1

    for _ in range(2 * (p - d) - 1):
        op(F, 0)
    for _ in range(d):
        op(F, 1)
        op(F, 0)
    for _ in range(p - d):
        op(F, 1), op(B, 1), op(W, 1)
    while count[(F, 1)] < count[(F, 0)] or count[(F, 0)] < n:
        if count[(F, 0)] < n:
            op(F, 0)
        op(B, 0), op(W, 0), op(F, 1), op(B, 1), op(W, 1)
    for _ in range(d):
        op(B, 0), op(B, 1)
    for _ in range(p - d):
        op(B, 0), op(W, 0)
    for c in (1, 0):
        while count[(W, c)] < count[(B, c)]:
            op(W, c)
    kept = [o for o in ops if o[2] < m]
    return [k for k, _, _ in kept], [j for _, _, j in kept], [c for _, c, _ in kept]


def schedule_order(schedule: str, stages: int, microbatches: int, virtual: int = 1):
    """Per device, the order of its ops as three lists (kind, micro-batch, chunk).

    Every schedule here runs its F ops in one fixed sequence of (micro-batch, chunk) and its B (and W)
    ops in another; a device's *pattern* says where Fs and Bs interleave. Chunk c of device d is the
    virtual stage c*p + d.
    """
    p, m, v = stages, microbatches, virtual
    _check_schedule(schedule, p, m, v)
    f_mb, f_chunk = forward_sequence(p, m, v)
    b_chunk = [v - 1 - c for c in f_chunk]
    orders = []
    if schedule == "zb-v":
        return [_zb_v_order(p, m, d) for d in range(p)]
    for d in range(p):
        if schedule == "zb-h1":
            kinds = _zb_h1_kinds(p, m, d)
        else:
            w = warmup_forwards(schedule, p, m, v, d)
            kinds = [F] * w + [F, B] * (m * v - w) + [B] * w
        nexts = {F: iter(zip(f_mb, f_chunk)).__next__, B: iter(zip(f_mb, b_chunk)).__next__}
        nexts[W] = iter(zip(f_mb, b_chunk)).__next__
        pairs = [nexts[k]() for k in kinds]
        orders.append((kinds, [j for j, _ in pairs], [c for _, c in pairs]))
    return orders


# ---------------------------------------------------------------- the result
@dataclass
class Simulation:
    """A simulated step. Times are in the caller's units (default: one micro-batch forward = 1)."""

    schedule: str
    stages: int
    microbatches: int
    virtual: int
    step_time: float
    """Time from the first op's start to the last op's end."""
    busy: list[float]
    """Per stage: time spent computing."""
    peak_inflight: list[float]
    """Per stage: most micro-batches whose activations it holds at once (a chunk counts 1/v)."""
    durations: list[tuple[float, float, float]] = field(repr=False, default_factory=list)
    """Per stage: the time of one F, B and W op."""
    computed_starts: list[list[float]] = field(repr=False, default_factory=list)
    """Per stage: the start times the simulator computed (see `starts`)."""
    w_pending: bool = field(repr=False, default=False)
    """computed_starts holds F and B ops only (a fast zb-h1 run): a W starts when the op before it ends."""
    _timeline: list[dict] | None = field(repr=False, default=None)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the step, measured from the timeline (mean over stages)."""
        return 1.0 - sum(self.busy) / (self.stages * self.step_time)

    @property
    def starts(self) -> list[list[float]]:
        """Per stage: the start time of each of its ops, in the order of schedule_order."""
        if self.w_pending:
            orders = schedule_order(self.schedule, self.stages, self.microbatches, self.virtual)
            for d, ((kinds, _, _), start, dur) in enumerate(zip(orders, self.computed_starts, self.durations)):
                main, out, t = iter(start), [], 0.0
                for k in kinds:
                    t = next(main) if k != W else t
                    out.append(t)
                    t += dur[k]
                self.computed_starts[d] = out
            self.w_pending = False
        return self.computed_starts

    @property
    def timeline(self) -> list[dict]:
        """Per stage: lists kind, microbatch, chunk, start, end (in execution order), built when first asked for."""
        if self._timeline is None:
            orders = schedule_order(self.schedule, self.stages, self.microbatches, self.virtual)
            self._timeline = [
                {
                    "kind": kinds,
                    "microbatch": mb,
                    "chunk": chunk,
                    "start": list(start),
                    "end": [a + dur[k] for a, k in zip(start, kinds)],
                }
                for (kinds, mb, chunk), start, dur in zip(orders, self.starts, self.durations)
            ]
        return self._timeline

    def events(self):
        """(stage, kind name, micro-batch, chunk, start, end) for every op, stage by stage."""
        for s, t in enumerate(self.timeline):
            for k, j, c, a, e in zip(t["kind"], t["microbatch"], t["chunk"], t["start"], t["end"]):
                yield s, KIND_NAMES[k], j, c, a, e

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "stages": self.stages,
            "microbatches": self.microbatches,
            "virtual": self.virtual,
            "step_time": self.step_time,
            "bubble_fraction": self.bubble_fraction,
            "peak_inflight": self.peak_inflight,
            "busy": self.busy,
        }


def _per_stage(name: str, value, stages: int) -> list[float]:
    """One positive finite time per stage, from a number (every stage the same) or a sequence of p."""
    values = [value] * stages if isinstance(value, (int, float)) and not isinstance(value, bool) else list(value)
    if len(values) != stages:
        raise ValueError(f"{name} needs one time per stage ({stages}), got {len(values)}")
    for x in values:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not (x > 0 and math.isfinite(x)):
            raise ValueError(f"{name} time must be positive and finite, got {x!r}")
    return [float(x) for x in values]


def _op_times(schedule, p, v, forward, backward) -> list[tuple[float, float, float]]:
    """Per stage (F, B, W) op times: a chunk takes 1/v of the stage; zb-h1 and zb-v split backward into equal
    B and W."""
    fw, bw = _per_stage("forward", forward, p), _per_stage("backward", backward, p)
    split = schedule in SPLIT_BACKWARD
    return [(f / v, (b / 2 if split else b) / v, b / 2 / v) for f, b in zip(fw, bw)]


def _peak_inflight(kinds: list[int], last_backward: int, v: int) -> float:
    """Most micro-batches whose activations a device holds: held from F's start to the last backward op."""
    delta = {F: 1, last_backward: -1}
    peak = max(accumulate(delta.get(k, 0) for k in kinds))
    return peak if v == 1 else peak / v


def _check_p2p(p2p: float) -> None:
    if isinstance(p2p, bool) or not isinstance(p2p, (int, float)) or not (p2p >= 0 and math.isfinite(p2p)):
        raise ValueError(f"p2p time must be >= 0 and finite, got {p2p!r}")


# ---------------------------------------------------------------- the naive simulator: an event loop
def simulate_event_loop(
    stages: int,
    microbatches: int,
    schedule: str = "1f1b",
    *,
    virtual: int = 1,
    forward: float | list[float] = 1.0,
    backward: float | list[float] = 2.0,
    p2p: float = 0.0,
) -> Simulation:
    """Simulate one step of `schedule` op by op (the naive reference; see `simulate`)."""
    p, m, v = stages, microbatches, virtual
    _check_schedule(schedule, p, m, v)
    _check_p2p(p2p)
    times = _op_times(schedule, p, v, forward, backward)
    orders = schedule_order(schedule, p, m, v)
    n_virtual = p * v
    per_kind = m * n_virtual
    dummy = 3 * per_kind  # an always-ready slot: deps on the same device are kept by the order itself
    deps, outs, durs = [], [], []
    for d, (kinds, mb, chunk) in enumerate(orders):
        dep, out = [], []
        for k, j, c in zip(kinds, mb, chunk):
            vs = virtual_stage(schedule, c, d, p)  # the slice of layers this op runs
            o = k * per_kind + j * n_virtual + vs
            out.append(o)
            if k == F and vs > 0:
                dep.append(o - 1)  # F(j) of the previous virtual stage
            elif k == B and vs < n_virtual - 1:
                dep.append(o + 1)  # B(j) of the next virtual stage
            else:
                dep.append(dummy)
        deps.append(dep)
        outs.append(out)
        durs.append([times[d][k] for k in kinds])
    starts = _longest_paths(deps, outs, durs, dummy, p2p if p > 1 else 0.0)
    return _result(schedule, p, m, v, orders, starts, times)


def _longest_paths(deps, outs, durs, dummy: int, p2p: float) -> list[list[float]]:
    """Start time of every op: max(device free, input arrived). Runs each device as far as its inputs
    allow and parks it on the op it waits for; finishing that op wakes it. O(ops), no time stepping."""
    n_dev = len(deps)
    arrived = [-1.0] * (dummy + 1)  # when an op's output reaches its consumer (finish + p2p); -1: not yet
    arrived[dummy] = 0.0
    waiting = [-1] * (dummy + 1)  # device parked on this op, or -1
    ptr, free = [0] * n_dev, [0.0] * n_dev
    starts: list[list[float]] = [[] for _ in range(n_dev)]
    ready = list(range(n_dev - 1, -1, -1))
    done = 0
    while ready:
        d = ready.pop()
        dep, out, dur, st = deps[d], outs[d], durs[d], starts[d]
        append = st.append
        i, n, t = ptr[d], len(dep), free[d]
        while i < n:
            a = arrived[dep[i]]
            if a < 0:
                waiting[dep[i]] = d
                break
            if a > t:
                t = a
            append(t)
            t += dur[i]
            o = out[i]
            arrived[o] = t + p2p
            w = waiting[o]
            if w >= 0:
                ready.append(w)
            i += 1
        done += i - ptr[d]
        ptr[d], free[d] = i, t
    total = sum(len(x) for x in deps)
    if done != total:
        stuck = [d for d in range(n_dev) if ptr[d] < len(deps[d])]
        raise ValueError(f"schedule deadlocks: stages {stuck[:8]} wait forever ({done} of {total} ops ran)")
    return starts


def _result(schedule, p, m, v, orders, starts, times) -> Simulation:
    last_backward = W if schedule in SPLIT_BACKWARD else B
    ends = [st[-1] + times[d][kinds[-1]] for d, ((kinds, _, _), st) in enumerate(zip(orders, starts))]
    first = min(st[0] for st in starts)
    busy = [sum(times[d][k] for k in kinds) for d, (kinds, _, _) in enumerate(orders)]
    peaks = [_peak_inflight(kinds, last_backward, v) for kinds, _, _ in orders]
    return Simulation(schedule, p, m, v, max(ends) - first, busy, peaks, times, starts)


# ---------------------------------------------------------------- the fast simulator: one slot at a time
def simulate(
    stages: int,
    microbatches: int,
    schedule: str = "1f1b",
    *,
    virtual: int = 1,
    forward: float | list[float] = 1.0,
    backward: float | list[float] = 2.0,
    p2p: float = 0.0,
) -> Simulation:
    """Simulate one step of `schedule`. forward/backward: time of one micro-batch through one whole
    stage, one number for every stage or one per stage (a chunk takes 1/virtual of it; zb-h1 splits backward
    into equal B and W halves); p2p: time to send an activation or gradient to the neighbouring stage."""
    p, m, v = stages, microbatches, virtual
    _check_schedule(schedule, p, m, v)
    _check_p2p(p2p)
    times = _op_times(schedule, p, v, forward, backward)
    if p == 1 or schedule == "zb-v":  # zb-v's V sends chunk 1's inputs back up the devices: no slot order
        return simulate_event_loop(p, m, schedule, virtual=v, forward=forward, backward=backward, p2p=p2p)
    collecting = gc.isenabled()
    gc.disable()  # millions of small lists and floats, none of them cyclic: the collector only slows it down
    try:
        plan = _slots(schedule, p, m, v, times)
        if plan is None:  # a schedule without the slot property: the op-by-op loop handles any order
            return simulate_event_loop(p, m, schedule, virtual=v, forward=forward, backward=backward, p2p=p2p)
        main_starts, free = _run_slots(plan, p, float(p2p))
        return _slot_result(schedule, p, m, v, times, main_starts, free)
    finally:
        if collecting:
            gc.enable()


def _slots(schedule: str, p: int, m: int, v: int, times):
    """Per slot: where every device's input comes from (indices 1 + slot * p + device into a flat list of op
    ends; 0 is an always-ready dummy), the op times, the W time that follows (zb-h1) and the devices whose input
    comes from the same slot (Fs from the device before, in device order; Bs from the device after, in
    reverse). None when some input comes from a later slot, or a same-slot chain would go round the devices."""
    n_f = m * v
    n = 2 * n_f  # F and B ops per device: every schedule here gives each device the same number
    zb = schedule == "zb-h1"
    warm = [warmup_forwards("1f1b" if zb else schedule, p, m, v, d) for d in range(p)]

    def ranges(d: int, kind: int) -> tuple[range, range]:
        """Slots of device d's F (or B) ops, in F (B) order: its pattern is [F]*w + [F, B]*(n_f - w) + [B]*w."""
        w = warm[d]
        return (range(w), range(w, n - w, 2)) if kind == F else (range(w + 1, n - w, 2), range(n - w, n))

    @functools.cache
    def slots_of(d: int, kind: int) -> list[int]:
        return list(chain(*ranges(d, kind)))

    @functools.cache
    def flat_of(d: int, kind: int) -> list[int]:
        spans = ranges(d, kind)
        return list(chain.from_iterable(range(1 + r.start * p + d, 1 + r.stop * p + d, r.step * p) for r in spans))

    later = [(k // p) % v != 0 for k in range(p, n_f)]  # F(k) of a chunk c > 0, for k >= p
    deps, durs, trails = [], [], []
    chain_f: dict[int, list[int]] = {}
    chain_b: dict[int, list[int]] = {}
    for d, w in enumerate(warm):
        inputs = []
        # F(k) takes F(k) of the device before; device 0's chunk c > 0 takes device p-1's chunk c-1, p Fs
        # earlier in the sequence. B(k) likewise from the device after, the last device's from device 0.
        for kind, src, same in ((F, d - 1, chain_f), (B, d + 1, chain_b)):
            own = slots_of(d, kind)
            if 0 <= src < p:
                dep, dep_slot = flat_of(src, kind), slots_of(src, kind)
            elif v > 1:
                src %= p
                dep = [0] * p + [q if c else 0 for c, q in zip(later, flat_of(src, kind))]
                dep_slot = [-1] * p + [q if c else -1 for c, q in zip(later, slots_of(src, kind))]
            else:
                dep, dep_slot = [0] * n_f, [-1] * n_f
            if any(map(gt, dep_slot, own)):
                return None
            chained = list(compress(own, map(eq, dep_slot, own)))
            if chained and abs(src - d) != 1:  # a chain would go round the devices within one slot
                return None
            for k in chained:
                same.setdefault(k, []).append(d)
            inputs.append(dep)
        f_dep, b_dep = inputs
        x = n_f - w
        deps.append(f_dep[:w] + list(chain.from_iterable(zip(f_dep[w:], b_dep[:x]))) + b_dep[x:])
        tf, tb, tw = times[d]
        durs.append([tf] * w + [tf, tb] * x + [tb] * w)
        if zb:  # the j-th B is followed by a W from j = d on; the last B by the d held back too
            trail = [0.0] * n
            own_b = slots_of(d, B)
            for j in range(min(d, m), m):
                trail[own_b[j]] = tw
            trail[own_b[-1]] += min(d, m) * tw
            trails.append(trail)
    for ds in chain_b.values():
        ds.reverse()  # Bs chain up the devices: the last first
    getters = [itemgetter(*slot) for slot in zip(*deps)]
    return getters, list(zip(*durs)), (list(zip(*trails)) if zb else None), chain_f, chain_b


def _run_slots(plan, p: int, p2p: float):
    """Slot by slot: start = max(device free, input end + p2p), end = start + op time, for every device at once."""
    getters, durs, trails, chain_f, chain_b = plan
    ends = [-p2p] + [0.0] * (len(getters) * p)  # the dummy input is ready at 0 (its end + p2p)
    free = [0.0] * p
    starts = []
    for k, (get, dur) in enumerate(zip(getters, durs)):
        start = [x if (x := a + p2p) > f else f for a, f in zip(get(ends), free)]
        for ds, step in ((chain_f.get(k), -1), (chain_b.get(k), 1)):
            if ds:  # inputs from the same slot: the source (d - 1 for F, d + 1 for B) is already final
                for d in ds:
                    x = start[d + step] + dur[d + step] + p2p
                    if x > start[d]:
                        start[d] = x
        end = list(map(add, start, dur))
        ends[1 + k * p : 1 + (k + 1) * p] = end
        free = list(map(add, end, trails[k])) if trails else end
        starts.append(start)
    return starts, free


def _slot_result(schedule, p, m, v, times, main_starts, free) -> Simulation:
    """The Simulation of a slot run. Start times stay per device in slot order (F and B ops); a zb-h1 W starts
    when the op before it ends, which Simulation.timeline fills in when asked."""
    zb = schedule == "zb-h1"
    busy, peaks = [], []
    for d in range(p):
        tf, tb, tw = times[d]
        if zb:
            peaks.append(_peak_inflight(_zb_h1_kinds(p, m, d), W, v))
            busy.append(m * (tf + tb + tw))
        else:
            w = warmup_forwards(schedule, p, m, v, d)
            peak = w + 1 if w < m * v else w  # held from F to B: the warm-up, then one more before each B
            peaks.append(peak if v == 1 else peak / v)
            busy.append(m * v * (tf + tb))
    per_device = [list(x) for x in zip(*main_starts)]
    step = max(free) - min(s[0] for s in per_device)
    return Simulation(schedule, p, m, v, step, busy, peaks, times, per_device, w_pending=zb)


def interleaved_peak_inflight(stages: int, virtual: int, microbatches: int | None = None) -> float:
    """Interleaved 1F1B's first stage holds p(1 + (p-1)/(pv)) = p + (p-1)/v micro-batches of activations
    (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198, Section 4.2): more than 1F1B's p.
    With few micro-batches the warm-up runs them all, and it holds all m."""
    peak = stages + (stages - 1) / virtual
    return peak if microbatches is None else min(peak, microbatches)


# ---------------------------------------------------------------- drawing
COLORS = {F: "#4c78a8", B: "#72b7b2", W: "#b279a2"}


def draw_timeline(ax, sim: Simulation, *, numbers: bool = True) -> None:
    """The papers' schedule diagram: one row per stage, one box per op, micro-batch numbers inside."""
    for s, t in enumerate(sim.timeline):
        for kind in (F, B, W):
            spans = [(a, e - a) for k, a, e in zip(t["kind"], t["start"], t["end"]) if k == kind]
            if spans:
                ax.broken_barh(spans, (s - 0.4, 0.8), facecolors=COLORS[kind], edgecolor="white", linewidth=0.5)
        if numbers:
            for k, j, c, a, e in zip(t["kind"], t["microbatch"], t["chunk"], t["start"], t["end"]):
                label = str(j + 1) if sim.virtual == 1 else f"{j + 1}{'abcdefgh'[c]}"
                ax.text(
                    (a + e) / 2, s, label, ha="center", va="center", fontsize=6, color="white" if k == F else "black"
                )
    ax.set_yticks(range(sim.stages), [f"stage {s}" for s in range(sim.stages)], fontsize=7)
    ax.set_ylim(sim.stages - 0.5, -0.5)
    ax.set_xlim(0, sim.step_time)
    ax.tick_params(axis="x", labelsize=7)


def ascii_timeline(sim: Simulation, max_cells: int = 160) -> str | None:
    """A text diagram (F, B, W, '.' idle; lower case for odd chunks) when every time is a whole
    number of the shortest op."""
    if sim.stages > 32 or sum(len(s) for s in sim.starts) > 32 * max_cells:
        return None
    durations = [e - a for t in sim.timeline for a, e in zip(t["start"][:3], t["end"][:3])]
    cell = min(durations)
    starts = [x / cell for t in sim.timeline for x in t["start"]]
    if sim.step_time / cell > max_cells or any(abs(x - round(x)) > 1e-9 for x in starts):
        return None
    rows = []
    for s, t in enumerate(sim.timeline):
        line = ["."] * int(round(sim.step_time / cell))
        for k, c, a, e in zip(t["kind"], t["chunk"], t["start"], t["end"]):
            for i in range(int(round(a / cell)), int(round(e / cell))):
                line[i] = KIND_NAMES[k] if c % 2 == 0 else KIND_NAMES[k].lower()
        rows.append(f"  stage {s:<3}|{''.join(line)}|")
    return "\n".join(rows)


# ---------------------------------------------------------------- CLI
MAX_CLI_CHUNK_PASSES = 2_000_000  # ~2-3 ops each, well under a microsecond per op: the CLI answers within seconds
MAX_CLI_TIMELINE_OPS = 500_000  # --timeline prints five numbers per op: a few tens of MB of JSON at most


def stage_times(maximum: float) -> Callable[[str], float | list[float]]:
    """argparse type: one positive time for every stage, or one per stage separated by commas ("1.1,1,1,1.2"),
    each checked as `positive` checks a number."""
    one = positive(float, maximum)

    def parse(text: str):
        values = [one(part) for part in text.split(",")]
        return values[0] if len(values) == 1 else values

    parse.__name__ = "times"
    return parse


@command("pipeline", "simulate a pipeline schedule: bubble fraction, step time, activations in flight")
def pipeline_command(argv: list[str]) -> int:
    p = parser(
        "pipeline",
        "Simulate one training step of a pipeline schedule, op by op.\n"
        "Times are in units of one micro-batch's forward through one stage, unless --forward gives that time.",
    )
    p.add_argument("--stages", type=positive(int), required=True, help="pipeline stages p (one per GPU)")
    p.add_argument("--microbatches", type=positive(int), required=True, help="micro-batches m per step")
    p.add_argument("--schedule", choices=SCHEDULES, default="1f1b", help="schedule (default 1f1b)")
    p.add_argument(
        "--virtual",
        type=positive(int),
        default=None,
        help="model chunks per GPU for --schedule interleaved (default 2)",
    )
    p.add_argument(
        "--forward",
        type=stage_times(1e6),
        default=1.0,
        help="forward time of one micro-batch through a stage: one number, or one per stage separated by commas "
        "(default 1, the unit of the other times)",
    )
    p.add_argument("--backward", type=stage_times(1e6), default=2.0, help="backward time, the same way (default 2)")
    p.add_argument(
        "--p2p", type=non_negative(float, 1e6), default=0.0, help="point-to-point send time between stages (default 0)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="with --json: every op of every stage (kind, micro-batch, chunk, start, end), to draw the step",
    )
    args = p.parse_args(argv)
    virtual = args.virtual or (2 if args.schedule in ("interleaved", "zb-v") else 1)
    if args.schedule == "zb-v" and virtual != 2:
        raise UsageError(f"distlab pipeline: --schedule zb-v runs exactly 2 chunks per GPU, not --virtual {virtual}")
    if args.virtual and args.schedule not in ("interleaved", "zb-v") and args.virtual != 1:
        raise UsageError(f"distlab pipeline: --virtual applies only to --schedule interleaved, not {args.schedule}")
    if args.stages * args.microbatches * virtual > MAX_CLI_CHUNK_PASSES:
        raise UsageError(
            f"distlab pipeline: at most {MAX_CLI_CHUNK_PASSES:,} stages x microbatches x virtual "
            f"(a few seconds of simulation), got {args.stages * args.microbatches * virtual:,}"
        )
    ops = args.stages * args.microbatches * virtual * (3 if args.schedule in SPLIT_BACKWARD else 2)
    if args.timeline and ops > MAX_CLI_TIMELINE_OPS:
        raise UsageError(f"distlab pipeline: --timeline prints at most {MAX_CLI_TIMELINE_OPS:,} ops, got {ops:,}")
    start = time.perf_counter()
    sim = simulate(
        args.stages,
        args.microbatches,
        args.schedule,
        virtual=virtual,
        forward=args.forward,
        backward=args.backward,
        p2p=args.p2p,
    )
    seconds = time.perf_counter() - start
    out = sim.to_dict() | {"forward": args.forward, "backward": args.backward, "p2p": args.p2p}
    uniform = not isinstance(args.forward, list) and not isinstance(args.backward, list)
    if not uniform:  # the closed forms assume every stage takes the same time
        out["bubble_fraction_formula"] = None
    elif args.schedule == "zb-h1":
        out["bubble_fraction_formula"] = zb_h1_bubble_fraction(
            args.stages, args.microbatches, args.forward, args.backward / 2, args.backward / 2
        )
    elif args.schedule == "zb-v":  # the closed form holds from m = 2p-1 on
        ok = args.microbatches >= 2 * args.stages - 1 and args.forward * 2 == args.backward
        out["bubble_fraction_formula"] = (
            zb_v_bubble_fraction(args.stages, args.microbatches, args.forward, args.backward) if ok else None
        )
    else:
        out["bubble_fraction_formula"] = bubble_fraction(args.stages, args.microbatches, virtual)
    if args.timeline:
        out["timeline"] = [
            {"kind": [KIND_NAMES[k] for k in t["kind"]]} | {k: t[k] for k in ("microbatch", "chunk", "start", "end")}
            for t in sim.timeline
        ]
    formula = out["bubble_fraction_formula"]
    unit = "one micro-batch forward = 1" if args.forward == 1.0 else "the unit of --forward"
    text = [
        f"{args.schedule}: p={args.stages} stages, m={args.microbatches} micro-batches"
        + (f", v={virtual} chunks per GPU" if virtual > 1 else ""),
        f"  step time        {sim.step_time:.6g} ({unit}; ideal {sum(sim.busy) / sim.stages:.6g})",
        f"  bubble fraction  {sim.bubble_fraction:.4%} measured, "
        + (
            "no closed form for stages of unequal times"
            if formula is None and not uniform
            else "no closed form here (zb-v's needs m >= 2p-1 and backward = 2 x forward)"
            if formula is None
            else f"{formula:.4%} formula"
            + {"zb-h1": " (holds for m >= p, p2p = 0)", "zb-v": " (m >= 2p-1, p2p = 0)"}.get(
                args.schedule, " (p2p = 0)"
            )
        ),
        f"  peak in flight   stage 0: {sim.peak_inflight[0]:g} micro-batches of activations, "
        f"last stage: {sim.peak_inflight[-1]:g}",
        f"  simulated {ops:,} ops in {seconds:.2f} s",
    ]
    diagram = ascii_timeline(sim)
    if diagram:
        text += [
            "",
            "  timeline (F forward, B backward, W weight gradient, . idle"
            + ("; lower case: odd chunks" if virtual > 1 else "")
            + "):",
            diagram,
        ]
    emit(out, args.json, "\n".join(text))
    return 0
