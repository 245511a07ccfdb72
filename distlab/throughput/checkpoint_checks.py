"""Chapter 10's checkpoint-interval numbers worked by hand: Young's √(2CM), Daly's (2006) higher-order interval and
his exact expected wall time T(τ) = M e^(R/M) (e^((τ+C)/M) - 1) W/τ typed out here, never taken from
distlab.throughput.young_daly; the simulators checked on a failure schedule worked through by hand.

Each function compares what the checkpoint-interval experiment put in its Result with these references, as claims.
"""

from __future__ import annotations

import math
import re

import numpy as np

from distlab.core.facts import value
from distlab.core.results import Result, worst_relative_gap

DAY_S, HOUR_S, MINUTE_S = 86400.0, 3600.0, 60.0


def mtbf_s() -> float:
    """Llama 3 405B's 54-day snapshot over its unexpected interruptions (Dubey et al. 2024, Table 5)."""
    row = "interconnect.Llama3-405B-pretraining"
    return value(f"{row}.days") * DAY_S / value(f"{row}.unexpected_interruptions")


def young(c: float, m: float) -> float:
    return (2 * c * m) ** 0.5


def daly(c: float, m: float) -> float:
    """Daly 2006, eq. (37): √(2CM)·[1 + (1/3)√(C/2M) + (1/9)(C/2M)] − C, for C < 2M."""
    return (2 * c * m) ** 0.5 * (1 + (c / (2 * m)) ** 0.5 / 3 + (c / (2 * m)) / 9) - c


def lost(tau: float, c: float, m: float, r: float = 0.0) -> float:
    """1 − W/T(τ): the fraction of wall time not spent on work, exact for exponential failures."""
    return 1 - tau / (m * math.exp(r / m) * (math.exp((tau + c) / m) - 1))


def lost_job(work: float, tau: float, c: float, m: float, r: float) -> float:
    """1 − W/T for a whole job of W seconds of work: ⌊W/τ⌋ segments of τ + C and a last one of the remainder, each
    segment of length L taking M e^(R/M) (e^(L/M) − 1) on average."""
    full = math.floor(work / tau)
    rest = work - full * tau
    seg = lambda length: m * math.exp(r / m) * (math.exp((length + c) / m) - 1)
    return 1 - work / (full * seg(tau) + (seg(rest) if rest > 0 else 0.0))


def first_order(tau: float, c: float, m: float, r: float) -> float:
    """Young's first-order overhead per second of work x = C/τ + (τ+C)/2M + R/M, as a share of wall time x/(1+x)."""
    x = c / tau + (tau + c) / (2 * m) + r / m
    return x / (1 + x)


class ScriptedGaps:
    """A stand-in for numpy's Generator whose exponential gaps are a fixed script (the scale is ignored)."""

    def __init__(self, gaps: list[float]) -> None:
        self.gaps = list(gaps)

    def exponential(self, scale: float, size: int | None = None):
        if size is None:
            return self.gaps.pop(0)
        return np.array([self.gaps.pop(0) for _ in range(size)])


def simulators_claim(r: Result, naive, vectorised) -> None:
    """W = 10 s of work, τ = 4, C = 1, R = 2, failure gaps 7, 1, 100: saves at 5 (4 done); the second segment dies
    at 7; the restart (7 + 2 = 9) dies at 8; the next (8 + 2 = 10) holds; segments end at 15 (8 done) and 18
    (a 2 s remainder, 10 done). Wall time 18 s, worked by hand; with no failure at all, 10 + ⌈10/4⌉·1 = 13 s."""
    walls = [
        naive(10.0, 4.0, 1.0, 1.0, 2.0, ScriptedGaps([7, 1, 100])),
        float(vectorised(10.0, 4.0, 1.0, 1.0, 2.0, 1, ScriptedGaps([7, 1, 100]))[0]),
    ]
    pairs = [(w, 18.0) for w in walls]
    pairs.append((float(vectorised(10.0, 4.0, 1.0, 1.0, 2.0, 1, ScriptedGaps([1e9]))[0]), 13.0))
    r.claim(
        "simulators on a hand-worked failure schedule: 18 s, and 13 s without failures (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


def scalars_claim(r: Result, *, jobs: int, work_mtbfs: int) -> None:
    """Every scalar the page shows, against the formulas above at the scenario's and worked problem's inputs."""
    from distlab.models.shapes import published_params

    q = {k: v.value for k, v in r.quantities.items()}
    m, c, rr = mtbf_s(), q["scenario_save_seconds"], q["scenario_restart_seconds"]
    ec, em = q["example_save_seconds"], q["example_mtbf_hours"] * HOUR_S
    p7 = published_params("7B")
    assert p7 is not None
    d = daly(c, m)
    pairs = [
        (q["mtbf_seconds"], m),
        (q["mtbf_hours"], m / HOUR_S),
        (q["young_seconds"], young(c, m)),
        (q["daly_seconds"], d),
        (q["lost_at_daly"], lost(d, c, m, rr)),
        (q["lost_at_hourly"], lost(HOUR_S, c, m, rr)),
        (q["lost_at_4h"], lost(4 * HOUR_S, c, m, rr)),
        (q["example_young_seconds"], young(ec, em)),
        (q["example_daly_seconds"], daly(ec, em)),
        (q["example_lost"], lost(daly(ec, em), ec, em)),
        (q["mc_work_hours"], work_mtbfs * m / HOUR_S),
        (q["mc_jobs"], jobs),
        # bf16 weights, fp32 master weights, Adam's m and v: 2 + 4 + 4 + 4 bytes per parameter (no gradients)
        (q["seven_b_state_bytes"], (2 + 4 + 4 + 4) * p7),
        (q["seven_b_save_seconds"], (2 + 4 + 4 + 4) * p7 / q["save_bytes_per_s"]),
    ]
    r.claim(
        "checkpoint scalars: M, Young, Daly, lost fractions, 7B state, by hand (largest gap)",
        worst_relative_gap(pairs),
        0.0,
        abs_tol=1e-12,
    )


def sweep_claims(r: Result, ax, *, young_s: float, factors, jobs: int, work_mtbfs: int) -> None:
    """The sweep figure's lines and the table's cells read back against T(τ) by hand (the Monte Carlo within the
    5 % its own claim allows), and both captions' numbers."""
    q = {k: v.value for k, v in r.quantities.items()}
    m, c, rr = mtbf_s(), q["scenario_save_seconds"], q["scenario_restart_seconds"]
    work = work_mtbfs * m
    exact, mc, marks = [], [], []
    for line in ax.get_lines():
        label, xs, ys = line.get_label(), line.get_xdata(), line.get_ydata()
        if label.startswith("exact"):
            exact += [(y, 100 * lost_job(work, x * MINUTE_S, c, m, rr)) for x, y in zip(xs, ys)]
        elif label == "Monte Carlo":
            mc += [(y, 100 * lost_job(work, x * MINUTE_S, c, m, rr)) for x, y in zip(xs, ys)]
        else:
            ref = young(c, m) if label.startswith("Young") else daly(c, m)
            marks += [(x, ref / MINUTE_S) for x in xs]
    r.claim(
        "sweep figure: exact line = T(τ) by hand at its minutes, Young and Daly marks (largest gap)",
        worst_relative_gap(exact + marks),
        0.0,
        abs_tol=1e-12,
    )
    r.claim("sweep figure: Monte Carlo points within 5 % of T(τ) by hand", worst_relative_gap(mc), 0.05, relation="<=")
    r.claim(
        "sweep figure: points drawn, exact and Monte Carlo = 2 x intervals swept",
        len(exact) + len(mc),
        2 * len(factors),
    )
    cells, mc_cells, sig3 = [], [], []
    rows = r.tables["sweep"].rows
    for i, row in enumerate(rows):
        k = 2.0 ** (-2 + i / 2)  # every other sweep point: 1/4 x to 4 x Young in steps of √2
        tau = k * young_s
        sig3.append((float(row[0]), k))
        cells += [(float(row[1].split()[0]), round(tau / MINUTE_S))]
        cells += [(float(row[3].split()[0]), round(100 * lost_job(work, tau, c, m, rr), 2))]
        cells += [(float(row[4].split()[0]), round(100 * first_order(tau, c, m, rr), 2))]
        mc_cells.append((float(row[2].split()[0]), 100 * lost_job(work, tau, c, m, rr)))
    cap = r.tables["sweep"].caption
    found = re.search(r"C = ([\d.]+) s, R = ([\d.]+) s, M = ([\d.]+) h; (\d+) jobs of (\d+) h work", cap)
    assert found is not None, cap
    nums = [float(x) for x in found.groups()]
    cells += list(zip(nums, [c, rr, round(m / HOUR_S, 2), jobs, round(work_mtbfs * m / HOUR_S)], strict=True))
    fig_m = re.search(r"M = ([\d.]+) h", r.figures["sweep"].caption)
    assert fig_m is not None
    cells.append((float(fig_m.group(1)), round(m / HOUR_S, 2)))
    r.claim(
        "sweep table and captions: cells = T(τ), first order and inputs by hand, as printed (largest gap)",
        worst_relative_gap(cells),
        0.0,
        abs_tol=1e-12,
    )
    r.claim(
        "sweep table: intervals (× Young) = 2^(-2 + i/2), printed to 3 digits (half a unit of the third)",
        worst_relative_gap(sig3),
        0.005,
        relation="<=",
    )
    r.claim(
        "sweep table: Monte Carlo column within 5 % of T(τ) by hand", worst_relative_gap(mc_cells), 0.05, relation="<="
    )
