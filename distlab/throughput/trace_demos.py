"""trace-demos: five real 2-rank training runs, each with one fault injected, traced by torch.profiler and diagnosed
by `distlab trace` from the trace files alone.

The reference is the fault itself: the run knows what it injected, the reader does not. Each run is a real gloo world
(distlab.runtime.launcher), recorded by distlab.throughput.trace_record; the reader gets only the per-rank JSON files.
Beside the verdicts, checks a wrong reader would fail: the causes of every step add up to the step; the data wait of
`slow-dataloader` is at least the transform's sleep; the straggler found is the rank that was slowed; exposed
communication agrees with a naive 1-µs raster of the same trace (an independent implementation of the interval
arithmetic).
"""

from __future__ import annotations

import statistics
import tempfile

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.throughput.trace_diagnose import DEMOS, FAULT_SHARE, RankView, diagnose
from distlab.throughput.trace_read import read_trace
from distlab.throughput.trace_record import ACTIVE_STEPS, DATA_SLEEP_S, STRAGGLER_FACTOR, record_all


def raster_exposed_us(view: RankView, step: int) -> float:
    """Exposed communication of a CPU-trace step on a 1-µs grid: microseconds where a collective runs and the
    training thread runs no work, no data loading, no sync and no stretched operator. Naive on purpose."""
    lo, hi = view.steps[step]
    base = int(lo)
    n = int(hi) - base + 1
    mark = [0] * n  # bit 1: communication, bit 2: anything the rank does itself

    def paint(ranges, bit):
        for a, b in ranges:
            for t in range(max(int(a + 0.5), int(lo + 0.5)) - base, min(int(b + 0.5), int(hi + 0.5)) - base):
                mark[t] |= bit

    paint(view.comm, 1)
    paint(view.compute + view.data + view.sync + view.stretched, 2)
    return float(sum(1 for m in mark if m == 1))


@experiment(
    "trace-demos",
    "five real 2-rank gloo runs with one injected fault each, traced and diagnosed by `distlab trace`",
    kind="measured",
)
def trace_demos(device: str) -> Result:
    r = Result("trace-demos")
    with tempfile.TemporaryDirectory(prefix="distlab-trace-demos-") as tmp:
        files = record_all(tmp, device=device)
        reports = {name: diagnose([read_trace(f) for f in files[name]]) for name in DEMOS}
        views = {name: [RankView(read_trace(f)) for f in files[name]] for name in ("exposed-allreduce", "healthy")}
    r.add("fault_share", FAULT_SHARE, "fraction", "a fault is named when it takes at least this share of the step")
    r.add("active_steps", ACTIVE_STEPS, "steps", "profiled steps per run")
    rows = []
    for name in DEMOS:
        d = reports[name]
        shares = {c["cause"]: c["share_of_step"] for c in d["causes"]}
        runner_up = max(v for k, v in shares.items() if k not in (name, "healthy", "host-other"))
        r.add(f"{name}_step_ms", 1e3 * d["step_s"], "ms", f"{name}: mean step, both ranks")
        r.add(f"{name}_share", shares[name], "fraction", f"{name}: the injected cause's score")
        r.add(f"{name}_unrecorded", d["unattributed_share"], "fraction", f"{name}: step with nothing recorded running")
        rows.append(
            [
                f"`{name}`",
                f"`{d['top_cause']}`",
                f"{100 * shares[name]:.0f} %",
                f"{100 * runner_up:.0f} %",
                f"{1e3 * d['step_s']:.0f}",
                f"{1e3 * d['exposed_communication_s']:.1f}",
                f"{100 * d['unattributed_share']:.0f} %",
            ]
        )
        r.claim(
            f"{name}: the reader's top cause is the injected fault",
            float(d["top_cause"] == name),
            1.0,
            formula=f"top cause {d['top_cause']!r}, injected {name!r}",
            kind="timing",
        )
        worst = max(
            abs(sum(x["time_by_cause"].values()) - x["step_s"]) / x["step_s"] for s in d["steps"] for x in s["ranks"]
        )
        r.claim(
            f"{name}: the causes of every step and rank add up to the step",
            worst,
            0.0,
            abs_tol=1e-9,
            unit="fraction",
            formula="max over steps and ranks of |sum of causes - step| / step",
        )
    r.table(
        "verdicts",
        [
            "injected fault",
            "reader's top cause",
            "its score",
            "next fault's score",
            "step (ms)",
            "exposed comm. (ms)",
            "unrecorded",
        ],
        rows,
        caption=f"2 ranks (gloo), one trace file per rank; a fault is named when it takes at least "
        f"{100 * FAULT_SHARE:.0f} % of the recorded step. Unrecorded: nothing profiled ran (mostly the machine's "
        "other processes), left out of the scores",
    )
    slow = reports["slow-dataloader"]
    data_s = min(x["time_by_cause"]["data_loading"] for s in slow["steps"] for x in s["ranks"])
    r.add("slow_data_s", data_s, "s", "slow-dataloader: least data wait of any step and rank")
    r.claim(
        "slow-dataloader: every step's data wait >= the transform's sleep",
        data_s,
        DATA_SLEEP_S,
        relation=">=",
        rel_tol=0.02,
        unit="s",
        formula=f"sleep {DATA_SLEEP_S} s per batch; a sleep is never shorter",
        kind="timing",
    )
    strag = reports["straggler"]
    r.add("straggler_rank", strag["straggler_rank"], "", "the rank the reader names slowest")
    r.add("straggler_excess_ms", 1e3 * strag["straggler_excess_s"], "ms", "its own work beyond the other rank's")
    r.claim(
        "straggler: the slowest rank found is the one slowed (rank 1)",
        strag["straggler_rank"],
        1,
        formula=f"rank 1 computes {STRAGGLER_FACTOR}x",
        kind="timing",
    )
    for name, vs in views.items():
        for v in vs:
            ours = sum(v.breakdown(s)["time_by_cause"]["communication_exposed"] for s in v.steps) * 1e6
            naive = sum(raster_exposed_us(v, s) for s in v.steps)
            r.claim(
                f"{name}, rank {v.trace.rank}: exposed communication = a 1-µs raster of the trace",
                ours,
                naive,
                abs_tol=2.0 * len(v.steps) * (1 + len(v.comm)),
                unit="µs",
                formula="interval arithmetic vs counting microseconds; tolerance: 1 µs rounding per range end",
            )
    mean_unrecorded = statistics.fmean(d["unattributed_share"] for d in reports.values())
    r.add("unrecorded_mean", mean_unrecorded, "fraction", "mean unrecorded share over the five runs")
    return r
