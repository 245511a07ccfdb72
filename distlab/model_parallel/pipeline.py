"""Pipeline-parallel schedules, simulated op by op: GPipe, 1F1B, interleaved 1F1B and zero-bubble ZB-H1.

p stages (one per device), m micro-batches per step. Each device runs a fixed order of operations,
F (forward of one micro-batch through its layers) and B (its backward); ZB-H1 splits B into B (input
gradient, needed by the previous stage) and W (weight gradient, needed by nobody until the optimizer).
An op starts when its device is free and its input has arrived: F(j) on stage s needs F(j) of stage
s-1, B(j) on stage s needs B(j) of stage s+1, each plus a point-to-point time. The simulator computes
every start time (a longest path through that graph), so the bubble is *measured* from the timeline:

    bubble fraction = idle time / step time,  closed form ((p-1)/v) / (m + (p-1)/v)

for GPipe and 1F1B (v = 1) and Megatron's interleaved schedule with v model chunks per device
(Narayanan et al. 2021, https://arxiv.org/abs/2104.04473, Section 2.2). 1F1B's point is memory: its
first stage holds p micro-batches of activations, GPipe's holds all m.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from distlab.core.cli import UsageError, command, emit, non_negative, parser, positive

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
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


def _check_sizes(stages: int, microbatches: int, virtual: int) -> None:
    for name, v in (("stages", stages), ("microbatches", microbatches), ("virtual", virtual)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


# ---------------------------------------------------------------- schedules as op orders
def schedule_order(schedule: str, stages: int, microbatches: int, virtual: int = 1):
    """Per device, the order of its ops as three int arrays (kind, micro-batch, chunk).

    Every schedule here runs its F ops in one fixed sequence of (micro-batch, chunk) and its B (and W)
    ops in another; a device's *pattern* says where Fs and Bs interleave. Chunk c of device d is the
    virtual stage c*p + d.
    """
    p, m, v = stages, microbatches, virtual
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
    elif v != 1:
        raise ValueError(f"virtual stages apply only to the interleaved schedule, not {schedule}")

    k = np.arange(m * v)
    if schedule == "interleaved":  # Megatron: groups of p micro-batches visit chunk 0, 1, .., v-1
        f_mb = (k // (p * v)) * p + k % p
        f_chunk = (k // p) % v
        b_chunk = v - 1 - f_chunk  # backward visits the chunks in reverse
    else:
        f_mb, f_chunk, b_chunk = k, np.zeros_like(k), np.zeros_like(k)

    orders = []
    for d in range(p):
        if schedule == "gpipe":
            pattern = np.array([F] * m + [B] * m)
        elif schedule == "1f1b":
            warmup = min(p - 1 - d, m)
            pattern = np.array([F] * warmup + [F, B] * (m - warmup) + [B] * warmup)
        elif schedule == "interleaved":
            warmup = min((p - 1 - d) * 2 + (v - 1) * p, m * v)
            pattern = np.array([F] * warmup + [F, B] * (m * v - warmup) + [B] * warmup)
        else:
            pattern = _zb_h1_pattern(p, m, d)
        mb = np.empty(len(pattern), dtype=np.int64)
        chunk = np.empty(len(pattern), dtype=np.int64)
        for kind, seq_mb, seq_chunk in ((F, f_mb, f_chunk), (B, f_mb, b_chunk), (W, f_mb, b_chunk)):
            at = pattern == kind
            n = int(at.sum())
            mb[at], chunk[at] = seq_mb[:n], seq_chunk[:n]
        orders.append((pattern, mb, chunk))
    return orders


def _zb_h1_pattern(p: int, m: int, d: int) -> np.ndarray:
    """ZB-H1: 1F1B's order of F and B, with stage d holding back d of its W ops so that they fill the
    gap at the end of the step, where the last Bs ripple back to stage 0 (the paper's Figure 3, top).
    A micro-batch's activations live until its W, so every stage holds at most p of them, as 1F1B's
    first stage does."""
    warmup = min(p - 1 - d, m)
    ops = [F] * warmup
    pending_w = 0
    for j in range(m):
        if j + warmup < m:
            ops.append(F)
        ops.append(B)
        pending_w += 1
        if pending_w > d:
            ops.append(W)
            pending_w -= 1
    return np.array(ops + [W] * pending_w)


# ---------------------------------------------------------------- the simulator
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
    timeline: list[dict] = field(repr=False, default_factory=list)
    """Per stage: numpy arrays kind, microbatch, chunk, start, end (in execution order)."""

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the step, measured from the timeline (mean over stages)."""
        return 1.0 - sum(self.busy) / (self.stages * self.step_time)

    def events(self):
        """(stage, kind name, micro-batch, chunk, start, end) for every op, stage by stage."""
        for s, t in enumerate(self.timeline):
            for k, j, c, a, e in zip(
                t["kind"].tolist(),
                t["microbatch"].tolist(),
                t["chunk"].tolist(),
                t["start"].tolist(),
                t["end"].tolist(),
            ):
                yield s, KIND_NAMES[k], j, c, a, e

    def __getitem__(self, key: str):
        """Dict-style access for callers that treat the result as a mapping: sim["bubble_fraction"]."""
        return self.timeline if key == "timeline" else self.to_dict()[key]

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


def simulate(
    stages: int,
    microbatches: int,
    schedule: str = "1f1b",
    *,
    virtual: int = 1,
    forward: float = 1.0,
    backward: float = 2.0,
    p2p: float = 0.0,
) -> Simulation:
    """Simulate one step of `schedule`. forward/backward: time of one micro-batch through one whole
    stage (a chunk takes 1/virtual of it; zb-h1 splits backward into equal B and W halves); p2p: time
    to send an activation or gradient to the neighbouring stage."""
    for name, value in (("forward", forward), ("backward", backward)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} time must be positive and finite, got {value}")
    if not (p2p >= 0 and math.isfinite(p2p)):
        raise ValueError(f"p2p time must be >= 0 and finite, got {p2p}")
    p, m, v = stages, microbatches, virtual
    orders = schedule_order(schedule, p, m, v)
    split = schedule == "zb-h1"
    durations = np.array([forward, backward / 2 if split else backward, backward / 2]) / v
    n_virtual = p * v
    per_kind = m * n_virtual
    dummy = 3 * per_kind  # an always-ready slot: deps on the same device are kept by the order itself

    deps, outs, durs = [], [], []
    for d, (kind, mb, chunk) in enumerate(orders):
        _check_order(kind, mb, chunk, d, m, v)
        vs = chunk * p + d  # virtual stage of each op
        out = kind * per_kind + mb * n_virtual + vs
        dep = np.full(len(kind), dummy, dtype=np.int64)
        fwd, bwd = kind == F, kind == B
        has_prev = fwd & (vs > 0)
        dep[has_prev] = out[has_prev] - 1  # F(j) of the previous virtual stage
        has_next = bwd & (vs < n_virtual - 1)
        dep[has_next] = out[has_next] + 1  # B(j) of the next virtual stage
        deps.append(dep.tolist())
        outs.append(out.tolist())
        durs.append(durations[kind].tolist())

    starts = _longest_paths(deps, outs, durs, dummy, p2p if p > 1 else 0.0)
    timeline, busy, peaks = [], [], []
    for d, (kind, mb, chunk) in enumerate(orders):
        start = np.array(starts[d])
        dur = np.array(durs[d])
        timeline.append({"kind": kind, "microbatch": mb, "chunk": chunk, "start": start, "end": start + dur})
        busy.append(float(dur.sum()))
        last_backward = W if split else B  # activations are held from F's start to the last backward op
        held = np.cumsum(np.where(kind == F, 1, 0) - np.where(kind == last_backward, 1, 0))
        peak = int(held.max())
        peaks.append(peak if v == 1 else peak / v)
    first = min(float(t["start"][0]) for t in timeline)
    step = max(float(t["end"][-1]) for t in timeline) - first
    return Simulation(schedule, p, m, v, step, busy, peaks, timeline)


def _check_order(kind, mb, chunk, d: int, m: int, v: int) -> None:
    """Each (micro-batch, chunk) must run F before B before W on its device, or the graph is wrong."""
    pos = np.full((3, m, v), -1, dtype=np.int64)
    pos[kind, mb, chunk] = np.arange(len(kind))
    if (pos[F] < 0).any() or (pos[B] < 0).any() or not (pos[F] < pos[B]).all():
        raise ValueError(f"stage {d}: every micro-batch needs F before B")
    if (kind == W).any() and not (pos[B] < pos[W]).all():
        raise ValueError(f"stage {d}: every micro-batch needs B before W")


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
            at = t["kind"] == kind
            if at.any():
                spans = list(zip(t["start"][at].tolist(), (t["end"][at] - t["start"][at]).tolist()))
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
    durations = [float(x) for t in sim.timeline for x in (t["end"] - t["start"])[:3]]
    cell = min(durations)
    starts = [x / cell for t in sim.timeline for x in t["start"].tolist()]
    if sim.step_time / cell > max_cells or sim.stages > 32 or any(abs(x - round(x)) > 1e-9 for x in starts):
        return None
    rows = []
    for s, t in enumerate(sim.timeline):
        line = ["."] * int(round(sim.step_time / cell))
        for k, c, a, e in zip(t["kind"].tolist(), t["chunk"].tolist(), t["start"].tolist(), t["end"].tolist()):
            for i in range(int(round(a / cell)), int(round(e / cell))):
                line[i] = KIND_NAMES[k] if c % 2 == 0 else KIND_NAMES[k].lower()
        rows.append(f"  stage {s:<3}|{''.join(line)}|")
    return "\n".join(rows)


# ---------------------------------------------------------------- CLI
MAX_CLI_CHUNK_PASSES = 2_000_000  # ~2-3 ops each, about 1-2 us per op: the CLI answers within seconds


@command("pipeline", "simulate a pipeline schedule: bubble fraction, step time, activations in flight")
def pipeline_command(argv: list[str]) -> int:
    p = parser(
        "pipeline",
        "Simulate one training step of a pipeline schedule, op by op.\n"
        "Times are in units of one micro-batch's forward through one stage.",
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
    p.add_argument("--backward", type=positive(float, 1e6), default=2.0, help="backward time (default 2)")
    p.add_argument(
        "--p2p", type=non_negative(float, 1e6), default=0.0, help="point-to-point send time between stages (default 0)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    virtual = args.virtual or (2 if args.schedule == "interleaved" else 1)
    if args.virtual and args.schedule != "interleaved" and args.virtual != 1:
        raise UsageError(f"distlab pipeline: --virtual applies only to --schedule interleaved, not {args.schedule}")
    if args.stages * args.microbatches * virtual > MAX_CLI_CHUNK_PASSES:
        raise UsageError(
            f"distlab pipeline: at most {MAX_CLI_CHUNK_PASSES:,} stages x microbatches x virtual "
            f"(a few seconds of simulation), got {args.stages * args.microbatches * virtual:,}"
        )
    start = time.perf_counter()
    sim = simulate(args.stages, args.microbatches, args.schedule, virtual=virtual, backward=args.backward, p2p=args.p2p)
    seconds = time.perf_counter() - start
    out = sim.to_dict() | {"forward": 1.0, "backward": args.backward, "p2p": args.p2p}
    if args.schedule == "zb-h1":
        out["bubble_fraction_formula"] = zb_h1_bubble_fraction(
            args.stages, args.microbatches, 1.0, args.backward / 2, args.backward / 2
        )
    else:
        out["bubble_fraction_formula"] = bubble_fraction(args.stages, args.microbatches, virtual)
    text = [
        f"{args.schedule}: p={args.stages} stages, m={args.microbatches} micro-batches"
        + (f", v={virtual} chunks per GPU" if virtual > 1 else ""),
        f"  step time        {sim.step_time:.6g} (one micro-batch forward = 1; ideal {sum(sim.busy) / sim.stages:.6g})",
        f"  bubble fraction  {sim.bubble_fraction:.4%} measured, {out['bubble_fraction_formula']:.4%} formula"
        + (" (holds for m >= p, p2p = 0)" if args.schedule == "zb-h1" else " (p2p = 0)"),
        f"  peak in flight   stage 0: {sim.peak_inflight[0]:g} micro-batches of activations, "
        f"last stage: {sim.peak_inflight[-1]:g}",
        f"  simulated {sum(len(t['kind']) for t in sim.timeline):,} ops in {seconds:.2f} s",
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
