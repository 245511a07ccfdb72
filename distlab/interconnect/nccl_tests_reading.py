"""nccl-tests-reading: what nccl-tests print (algbw, busbw per collective) and how to read a printed sweep.

nccl-tests report algbw = S / t and busbw = algbw x a factor per collective (doc/PERFORMANCE.md), chosen so that a
perfect implementation's busbw is the link's per-direction bandwidth whatever the number of ranks. The factors are
three things at once, and the table checks that they agree:
- PERFORMANCE.md's printed formula (interconnect.toml `busbw-*`, its text and its multiplier / rank term);
- distlab.hardware.collectives' bandwidth factor (bytes one rank moves per byte of S over its link, ring algorithms);
- NCCL's own tuner, which turns busBw into algbw by n / nsteps for a ring (tuning.cc).

Then the published sweeps of nccl_tests.toml are read the way an engineer reads one: check the columns against each
other (a transcription or a copy-paste error breaks them), find the latency floor and the half-bandwidth size, compare
the plateau with the link model, and say what the sweep cannot tell.
"""

from __future__ import annotations

import math
import re

import numpy as np

from distlab.core.experiments import experiment
from distlab.core.facts import entries, value
from distlab.core.results import Quantity, Result
from distlab.hardware.collectives import steps_and_factor
from distlab.hardware.links import per_direction_bytes_per_s
from distlab.interconnect import nccl_source_checks, nccl_tests_checks, placement_checks

SWEEP = "dgxc-h100-8gpu-all-reduce"
A100_SWEEP = "mleng-a100-8gpu-all-reduce"
TWO_NODE_SWEEP = "datacrunch-h200-2node-all-reduce"
OPS = {  # busbw-* entry -> distlab.hardware.collectives op (None: not in the cost model)
    "busbw-allreduce": "all-reduce",
    "busbw-allgather": "all-gather",
    "busbw-reducescatter": "reduce-scatter",
    "busbw-alltoall": "all-to-all",
    "busbw-broadcast": "broadcast",
    "busbw-reduce": None,
    "busbw-sendrecv": None,
}
NSTEPS = {"all-reduce": lambda n: 2 * (n - 1), "all-gather": lambda n: n - 1, "reduce-scatter": lambda n: n - 1}
_FORMULA = re.compile(r"^[0-9n*/()+\- ]+$")


def formula_factor(text: str, ranks: int) -> float:
    """PERFORMANCE.md's factor as printed ("2*(n-1)/n") evaluated at n = ranks; only n, digits and + - * / ( )."""
    if not _FORMULA.match(text):
        raise ValueError(f"not a busbw formula: {text!r}")
    return float(eval(text, {"__builtins__": {}}, {"n": ranks}))  # validated above: digits, n and arithmetic


def data_factor(entry: str, ranks: int) -> float:
    """The same factor from the entry's fields: multiplier x ((n-1)/n if it has the rank term)."""
    row = entries("interconnect")[entry]
    return row["busbw_multiplier"] * ((ranks - 1) / ranks if row["rank_term"] else 1.0)


def sweep(name: str) -> dict:
    return entries("nccl_tests")[name]


TABLE_RANKS = 8  # the factor table's n, as its header prints it
EXCERPT_SIZES = (8, 32, 1024, 4096, 65536, 2**20, 2**24, 2**27, 2**30, 2**33, 2**34)  # the rows the page shows
FLAT_BYTES = 4096  # the latency-bound range the page names: 8 B to 4 KiB
LARGE_BYTES = 2**30  # the bandwidth regime the page names: from 1 GiB up
OUTLIER_GAP = 1.3  # out-of-place and in-place times more than 30 % apart, as the page says


def half_bandwidth_bytes(sizes, busbw) -> float:
    """The first size whose busbw reaches half the sweep's largest, interpolated in log(size)."""
    half = max(busbw) / 2
    for i in range(1, len(sizes)):
        if busbw[i] >= half > busbw[i - 1]:
            f = (half - busbw[i - 1]) / (busbw[i] - busbw[i - 1])
            return math.exp(math.log(sizes[i - 1]) + f * (math.log(sizes[i]) - math.log(sizes[i - 1])))
    return float(sizes[0])


@experiment(
    "nccl-tests-reading",
    "nccl-tests' algbw and busbw per collective against the cost model and NCCL's tuner, and a published sweep read",
    kind="computed",
)
def nccl_tests_reading(device: str) -> Result:
    r = Result("nccl-tests-reading", kind="computed")
    nccl_source_checks.nccl_source_claim(r)  # the NCCL figures it reads, against NCCL's own
    placement_checks.source_quotes_claim(
        r
    )  # the links and the DGX this page's NCCL model runs on (chapter 9 claims it)
    _factors(r)
    _read_sweep(r)
    _other_sweeps(r)
    return r


def _factors(r: Result) -> None:
    rows = []
    for entry, op in OPS.items():
        row = entries("interconnect")[entry]
        for n in (3, 8, 64):
            printed = formula_factor(row["busbw_formula"], n)
            r.claim(
                f"{entry}: PERFORMANCE.md's formula = the entry's multiplier and rank term, n = {n}",
                data_factor(entry, n),
                printed,
                rel_tol=1e-12,
                formula=row["busbw_formula"],
            )
            if op is not None:
                r.claim(
                    f"{entry}: busbw factor = bytes per rank over S in the ring cost model, n = {n}",
                    steps_and_factor(op, n)[1],
                    printed,
                    rel_tol=1e-12,
                    formula="distlab.hardware.collectives.steps_and_factor",
                )
            if op in NSTEPS:
                r.claim(
                    f"{entry}: busbw factor = NCCL's ring nsteps / n, n = {n}",
                    NSTEPS[op](n) / n,
                    printed,
                    rel_tol=1e-12,
                    formula="tuning.cc: algbw = busBw x nRanks / nsteps",
                )
        cost = steps_and_factor(op, TABLE_RANKS)[1] if op else None
        rows.append(
            [
                entry.removeprefix("busbw-"),
                f"`{row['busbw_formula']}`",
                f"{formula_factor(row['busbw_formula'], TABLE_RANKS):.4g}",
                f"{cost:.4g}" if cost is not None else "(not modelled)",
                f"{NSTEPS[op](TABLE_RANKS) / TABLE_RANKS:.4g}" if op in NSTEPS else "",
                f"`{row['algbw_bytes']}`",
            ]
        )
    r.table(
        "busbw",
        [
            "collective",
            "busbw / algbw (PERFORMANCE.md)",
            "at n = 8",
            "cost model: bytes per rank / S",
            "NCCL tuner: nsteps / n",
            "S in algbw = S / t",
        ],
        rows,
        caption="nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md at a0b82b22; send/recv from src/sendrecv.cu) "
        "beside the ring cost model's bandwidth factor and NCCL's own busBw-to-algbw conversion",
    )
    # every factor cell at n = 8 from the entry's own fields (multiplier x (n-1)/n when it has the rank term)
    cells = [
        (float(x), float(f"{data_factor(entry, TABLE_RANKS):.4g}"))
        for entry, row in zip(OPS, r.tables["busbw"].rows)
        for x in row[2:5]
        if x not in ("", "(not modelled)")
    ]
    r.claim(
        f"the factor table at n = {TABLE_RANKS}: every printed factor = the entry's multiplier x rank term",
        max(abs(a - b) for a, b in cells),
        0.0,
        abs_tol=1e-12,
        formula="busbw_multiplier x ((n-1)/n if rank_term)",
    )


def _read_sweep(r: Result) -> None:
    row = sweep(SWEEP)
    nccl_tests_checks.check_columns(r, SWEEP, row)
    sizes, n = row["bytes"], row["ranks"]
    best_t = [min(a, b) for a, b in zip(row["time_us"], row["inplace_time_us"])]
    busbw = [max(a, b) for a, b in zip(row["busbw_gbps"], row["inplace_busbw_gbps"])]
    line = per_direction_bytes_per_s(row["link"])
    effective = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9
    floor = min(best_t) * 1e-6
    r.add("ranks", n, "", "ranks in the printed sweep")
    r.add("busbw_factor", 2 * (n - 1) / n, "", "busbw / algbw for its all-reduce")
    r.add("flat_span", FLAT_BYTES // sizes[0], "", "largest / smallest size of the latency-bound range")
    r.add("floor_s", floor, "s", "smallest time of any size (the latency floor)")
    r.add("floor_per_step_s", floor / (2 * (n - 1)), "s", "the floor over a ring's 2(n-1) steps")
    r.add("peak_busbw", max(busbw) * 1e9, "B/s", "largest busbw")
    r.add("peak_over_line", max(busbw) * 1e9 / line, "", "largest busbw / NVLink line rate")
    r.add("peak_over_effective", max(busbw) * 1e9 / effective, "", "largest busbw / NCCL's effective ring rate")
    r.add("line_rate", line, "B/s", "NVLink 4 per direction")
    half = half_bandwidth_bytes(sizes, busbw)
    r.add("half_bandwidth_bytes", half, "B", "size at which busbw reaches half its peak")
    r.add("avg_busbw", row["avg_busbw_gbps"] * 1e9, "B/s", "the sweep's 'Avg bus bandwidth' line")
    # the floor, as a ring: 2(n-1) steps; a bandwidth-only time at the floor size would be tiny
    flat = [t for s, t in zip(sizes, best_t) if s <= FLAT_BYTES]
    r.add("flat_growth", max(flat) / min(flat), "", "slowest / fastest time from 8 B to 4 KiB")
    r.claim(
        "the latency floor: from 8 B to 4 KiB the time grows by less than half",
        max(flat) / min(flat),
        1.5,
        relation="<=",
        formula="a latency-bound regime: t ≈ α steps, independent of S",
    )
    plateau_algbw = max(row["algbw_gbps"]) * 1e9
    r.add("alpha_beta_half_bytes", floor * plateau_algbw, "B", "n½ of the α-β line through the floor and plateau")
    r.claim(
        "the printed n½ is above the α-β line's (floor x plateau algbw): mid sizes are slower than both regimes",
        half,
        floor * plateau_algbw,
        relation=">=",
        unit="B",
        formula="t = α + S/B reaches half its busbw at S = αB",
    )
    big = [(s, t) for s, t in zip(sizes, best_t) if s >= LARGE_BYTES]
    slopes = [math.log(t2 / t1) / math.log(s2 / s1) for (s1, t1), (s2, t2) in zip(big, big[1:])]
    r.add("large_slope", float(np.mean(slopes)), "", "d log t / d log S from 1 GiB up")
    r.claim(
        "the bandwidth regime: from 1 GiB up the time doubles with the size",
        float(np.mean(slopes)),
        1.0,
        abs_tol=0.03,
        formula="mean slope of log t against log S",
    )
    outliers = [
        (s, o, i)
        for s, o, i in zip(sizes, row["time_us"], row["inplace_time_us"])
        if max(o, i) > OUTLIER_GAP * min(o, i)
    ]
    r.add("outliers", len(outliers), "", "sizes whose out-of-place and in-place times differ by more than 30 %")
    if outliers:
        s, o, i = max(outliers, key=lambda x: max(x[1], x[2]) / min(x[1], x[2]))
        r.add("worst_outlier_bytes", s, "B", "the size with the largest out-of-place / in-place gap")
        r.add("worst_outlier_ratio", max(o, i) / min(o, i), "", "its slower / faster time")
    rows = []
    for i, s in enumerate(sizes):
        if s in EXCERPT_SIZES:
            rows.append(
                [
                    f"{s:,}",
                    f"{s // 4:,}",
                    f"{row['time_us'][i]:g}",
                    f"{row['algbw_gbps'][i]:.2f}",
                    f"{row['busbw_gbps'][i]:.2f}",
                    f"{row['inplace_time_us'][i]:g}",
                    f"{row['inplace_algbw_gbps'][i]:.2f}",
                    f"{row['inplace_busbw_gbps'][i]:.2f}",
                ]
            )
    r.table(
        "sweep",
        [
            "size (B)",
            "count (float)",
            "time (us)",
            "algbw (GB/s)",
            "busbw (GB/s)",
            "in-place time",
            "algbw",
            "busbw",
        ],
        rows,
        caption=f"all_reduce_perf on {n} x H100 SXM (one node), excerpt of the published sample output "
        "(NVIDIA/dgxc-benchmarking, nccl/README.md at 841f5466), as printed",
    )
    doc = formula_factor(value("interconnect.busbw-allreduce.busbw_formula"), n)  # "2*(n-1)/n", as printed
    by_links = nccl_tests_checks.links_bytes_per_s(row["link"])  # 18 x 25 GB/s, not the datasheet's 900 / 2
    nccl_tests_checks.check_reading(r, row, doc, by_links, FLAT_BYTES, LARGE_BYTES, OUTLIER_GAP)


def _other_sweeps(r: Result) -> None:
    """The A100 sweep (another source, another chip) reaches the same fraction of its line rate as NCCL's stated
    effective H100 rate; the 2-node H200 sweep shows what a sweep cannot tell without the network's description."""
    a100 = sweep(A100_SWEEP)
    nccl_tests_checks.check_columns(r, A100_SWEEP, a100)
    a100_line = per_direction_bytes_per_s(a100["link"])
    a100_frac = max(a100["busbw_gbps"]) * 1e9 / a100_line
    h100_frac = (
        value("interconnect.nccl-nvlink4.effective_gbytes_per_s")
        * 1e9
        / per_direction_bytes_per_s(value("interconnect.nccl-nvlink4.link"))
    )
    r.add("a100_peak_busbw", max(a100["busbw_gbps"]) * 1e9, "B/s", "A100 sweep: largest busbw")
    r.add("a100_line_rate", a100_line, "B/s", "NVLink 3 per direction")
    r.add("a100_fraction", a100_frac, "fraction", "A100: largest busbw / line rate")
    r.add("h100_effective_fraction", h100_frac, "fraction", "H100: NCCL's effective rate / line rate")
    r.claim(
        "A100 ring plateau / NVLink 3 line rate = NCCL's stated H100 effective / NVLink 4 line rate",
        a100_frac,
        h100_frac,
        rel_tol=0.1,
        formula="the same protocol overhead on two NVLink generations (two sources)",
    )
    two = sweep(TWO_NODE_SWEEP)
    nccl_tests_checks.check_columns(r, TWO_NODE_SWEEP, two)
    s1, s2 = two["bytes"][-2], two["bytes"][-1]
    t1, t2 = two["time_us"][-2] * 1e-6, two["time_us"][-1] * 1e-6
    inv_bw = (t2 - t1) / (s2 - s1)  # the alpha-beta line through the two largest points
    r.add("two_node_ranks", two["ranks"], "", "2-node sweep: ranks")
    r.add("two_node_busbw_1g", two["busbw_gbps"][-1] * 1e9, "B/s", "2-node sweep: busbw at 1 GiB")
    r.add("two_node_last_ratio", t2 / t1, "", "2-node sweep: time ratio of the last doubling")
    r.add("two_node_marginal_algbw", 1 / inv_bw, "B/s", "2-node sweep: algbw of the last doubling (ΔS/Δt)")
    r.add("two_node_marginal_busbw", 2 * (two["ranks"] - 1) / two["ranks"] / inv_bw, "B/s", "the same as busbw")
    r.claim(
        "2-node sweep: the last doubling of S less than doubles the time (not yet bandwidth-bound at 1 GiB)",
        t2 / t1,
        2.0,
        relation="<=",
        formula="t = α + S/B: t(2S)/t(S) < 2 while α matters",
    )
    r.table(
        "others",
        ["sweep", "ranks", "largest busbw", "link per direction", "largest busbw / link"],
        [
            [
                "8 x A100, one node (ml-engineering)",
                a100["ranks"],
                Quantity(max(a100["busbw_gbps"]) * 1e9, "B/s"),
                Quantity(a100_line, "B/s"),
                f"{100 * a100_frac:.1f} %",
            ],
            [
                "16 x H200, two nodes (datacrunch)",
                two["ranks"],
                Quantity(max(two["busbw_gbps"]) * 1e9, "B/s"),
                "not printed (NICs unknown)",
                "",
            ],
        ],
        caption="Two more published sweeps (nccl_tests.toml), columns checked the same way",
    )
    nccl_tests_checks.check_other_sweeps(r, a100, two)
