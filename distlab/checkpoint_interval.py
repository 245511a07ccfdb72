"""checkpoint-interval: how often to save, from the cost of a save and the mean time between failures.

Symbols: C seconds to write a checkpoint, M the job's mean time between failures (failures are a Poisson
process: exponential gaps), R seconds to restart (reschedule, load the checkpoint, warm up), tau the useful
work between checkpoints.

- Young (1974), first order: the waste per unit of work is C/tau (saving) + tau/(2M) (on average half an
  interval of work is redone per failure), minimised at tau = sqrt(2 C M).
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22:
  for exponential failures the expected wall time of W seconds of work is exactly

      T(tau) = M e^(R/M) (e^((tau + C)/M) - 1) W / tau                          (failures may strike during
                                                                                  work, saves and restarts)

  and its minimum is near tau = sqrt(2CM) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M (else tau = M).

The experiment measures C's ingredient (bytes/s of saving a real state dict), then runs a Monte Carlo of
jobs with random failures and restarts across intervals, and checks that its optimum is the formula's.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import numpy as np
import torch

from distlab.cli import command, emit, parser
from distlab.experiments import experiment
from distlab.facts import fact
from distlab.gpt import GPT, GPTConfig, param_count, random_batch
from distlab.model_shapes import preset
from distlab.results import Result

HOUR = 3600.0


# ---------------------------------------------------------------- formulas
def young_seconds(save_s: float, mtbf_s: float) -> float:
    """Young's interval sqrt(2 C M)."""
    return math.sqrt(2 * save_s * mtbf_s)


def daly_seconds(save_s: float, mtbf_s: float) -> float:
    """Daly's higher-order estimate of the optimum; M itself when C >= 2M."""
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    x = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - save_s


def lost_fraction(interval_s: float, save_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Expected fraction of wall time not spent on useful work, exact for exponential failures (Daly's
    complete model): 1 - W / T(tau)."""
    x = (interval_s + save_s) / mtbf_s
    # log of the expected wall time per segment, M e^(R/M) (e^x - 1): in logs, so that a save or restart
    # many MTBFs long gives a loss of ~100 % instead of an overflow (log(e^x - 1) = x + log1p(-e^-x)).
    log_growth = math.log(math.expm1(x)) if x < 30 else x + math.log1p(-math.exp(-x))
    log_wall = math.log(mtbf_s) + restart_s / mtbf_s + log_growth
    return 1 - math.exp(math.log(interval_s) - log_wall)


def expected_wall_seconds(work_s: float, interval_s: float, save_s: float, mtbf_s: float,
                          restart_s: float = 0.0) -> float:
    """Exact expected wall time of `work_s` seconds of work saved every `interval_s` (the last segment may
    be shorter). A segment of length L (work + save) takes M e^(R/M) (e^(L/M) - 1) on average: e^(L/M) - 1
    failures are expected before it completes, each costing its lost work and a restart that may fail too."""
    full, rest = divmod(work_s, interval_s)
    per = lambda length: mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((length + save_s) / mtbf_s)
    return full * per(interval_s) + (per(rest) if rest > 0 else 0.0)


def first_order_lost_fraction(interval_s: float, save_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Young's first-order estimate. The overhead per second of work is x = C/tau + (tau + C)/(2M) + R/M
    (saves, plus per failure (rate 1/M) half a segment redone and a restart); the lost fraction of wall
    time is x / (1 + x). Valid when tau + C << M."""
    x = save_s / interval_s + (interval_s + save_s) / (2 * mtbf_s) + restart_s / mtbf_s
    return x / (1 + x)


def optimal_seconds(save_s: float, mtbf_s: float) -> float:
    """The exact minimiser of lost_fraction (golden-section search in log tau; R does not move it)."""
    lo, hi = math.log(save_s * 1e-3 + 1e-12), math.log(10 * mtbf_s)
    f = lambda u: lost_fraction(math.exp(u), save_s, mtbf_s)
    g = (math.sqrt(5) - 1) / 2
    a, b = lo + (1 - g) * (hi - lo), lo + g * (hi - lo)
    for _ in range(200):
        if f(a) < f(b):
            hi, b = b, a
            a = lo + (1 - g) * (hi - lo)
        else:
            lo, a = a, b
            b = lo + g * (hi - lo)
    return math.exp((lo + hi) / 2)


# ---------------------------------------------------------------- Monte Carlo
def simulate_job_naive(work_s: float, interval_s: float, save_s: float, mtbf_s: float, restart_s: float,
                       rng: np.random.Generator) -> float:
    """One job, event by event: work an interval, save; a failure (exponential gaps on the wall clock)
    loses everything since the last completed save, then a restart that can itself fail. Wall seconds."""
    wall, done = 0.0, 0.0
    next_failure = rng.exponential(mtbf_s)
    while done < work_s:
        segment = min(interval_s, work_s - done)
        if wall + segment + save_s <= next_failure:
            wall += segment + save_s
            done += segment
            continue
        wall = next_failure  # failed mid-segment: its work and any partial save are lost
        while True:
            next_failure = wall + rng.exponential(mtbf_s)
            if wall + restart_s <= next_failure:
                wall += restart_s
                break
            wall = next_failure
    return wall


def simulate_jobs(work_s: float, interval_s: float, save_s: float, mtbf_s: float, restart_s: float, jobs: int,
                  rng: np.random.Generator) -> np.ndarray:
    """simulate_job_naive for `jobs` independent jobs at once (numpy arrays, one element per job)."""
    wall = np.zeros(jobs)
    done = np.zeros(jobs)
    next_failure = rng.exponential(mtbf_s, jobs)
    active = done < work_s
    while active.any():
        idx = np.nonzero(active)[0]
        segment = np.minimum(interval_s, work_s - done[idx])
        ok = wall[idx] + segment + save_s <= next_failure[idx]
        good, bad = idx[ok], idx[~ok]
        wall[good] += segment[ok] + save_s
        done[good] += segment[ok]
        wall[bad] = next_failure[bad]
        pending = bad
        while pending.size:  # restarts, which may fail again
            next_failure[pending] = wall[pending] + rng.exponential(mtbf_s, pending.size)
            fine = wall[pending] + restart_s <= next_failure[pending]
            wall[pending[fine]] += restart_s
            pending = pending[~fine]
            wall[pending] = next_failure[pending]
        active = done < work_s
    return wall


def llama3_mtbf_seconds() -> float:
    """Mean time between unexpected interruptions of Llama 3 405B pre-training (16K H100 GPUs)."""
    days = fact("interconnect.Llama3-405B-pretraining.days").value
    return days * 24 * HOUR / fact("interconnect.Llama3-405B-pretraining.unexpected_interruptions").value


# ---------------------------------------------------------------- measuring a save
SAVE_MODEL = GPTConfig(vocab=4096, seq=128, layers=4, hidden=384, heads=6)


def measure_save(device: str, cfg: GPTConfig = SAVE_MODEL, repeats: int = 3) -> dict[str, float]:
    """Train one AdamW step (so the optimizer state exists), then torch.save model + optimizer state to a
    file and fsync it. Returns bytes written, the best time, and parameters."""
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = random_batch(cfg, 1, seed=0)
    model(x[:, :4].to(device), y[:, :4].to(device)).backward()  # 4 tokens: the state, not the math, matters
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    best = math.inf
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt.pt")
        for _ in range(repeats):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                torch.save(state, f)  # GPU tensors are copied to host memory as they are written
                f.flush()
                os.fsync(f.fileno())
            best = min(best, time.perf_counter() - t0)
            size = os.path.getsize(path)
    return {"bytes": size, "seconds": best, "params": param_count(cfg), "bytes_per_s": size / best,
            "param_tensors": len(list(model.parameters()))}


# ---------------------------------------------------------------- the experiment
SCENARIO_SAVE_S = 60.0  # a scenario, not a fact: a sharded checkpoint written in one minute
SCENARIO_RESTART_S = 300.0  # and five minutes to reschedule, load it and warm up


@experiment("checkpoint-interval", "a real state-dict save (bytes/s), Young and Daly, and a Monte Carlo of failures")
def checkpoint_interval(device: str) -> Result:
    r = Result("checkpoint-interval")
    save = measure_save(device)
    r.add("save_bytes", save["bytes"], "B", "checkpoint file (weights + AdamW state)")
    r.add("save_seconds", save["seconds"], "s", "time to write it, fsync included (best of 3)")
    r.add("save_bytes_per_s", save["bytes_per_s"], "B/s", "save throughput")
    r.add("save_params", save["params"], "params", "parameters of the saved model")
    # fp32 AdamW: weights, m and v (gradients are not saved), plus step counters and pickle overhead.
    r.claim("checkpoint bytes = 12 B/param (fp32 weights, m, v)", save["bytes"] / save["params"], 12.0,
            rel_tol=0.02, unit="B/param", formula="4 + 4 + 4; ≤ 2 % for step counters, names and pickle framing")
    seven_b_state = 14 * preset("7B").params()  # bf16 weights + fp32 master, m, v
    r.add("seven_b_state_bytes", seven_b_state, "B", "7B training state (14 B/param: no gradients)")
    r.add("seven_b_save_seconds", seven_b_state / save["bytes_per_s"], "s", "7B state at this machine's rate")

    mtbf = llama3_mtbf_seconds()
    c, rr = SCENARIO_SAVE_S, SCENARIO_RESTART_S
    r.add("mtbf_seconds", mtbf, "s", "Llama 3 405B pre-training: 54 days / 419 unexpected interruptions")
    r.add("mtbf_hours", mtbf / HOUR, "h", "the same in hours")
    r.add("scenario_save_seconds", c, "s", "scenario: C")
    r.add("scenario_restart_seconds", rr, "s", "scenario: R")
    young, daly, exact = young_seconds(c, mtbf), daly_seconds(c, mtbf), optimal_seconds(c, mtbf)
    r.add("young_seconds", young, "s", "Young: sqrt(2CM)")
    r.add("daly_seconds", daly, "s", "Daly's higher-order interval")
    r.add("exact_seconds", exact, "s", "exact minimiser of the expected wall time")
    r.add("lost_at_daly", lost_fraction(daly, c, mtbf, rr), "fraction", "time lost at Daly's interval")
    r.add("lost_at_hourly", lost_fraction(HOUR, c, mtbf, rr), "fraction", "time lost saving every hour")
    r.add("lost_at_4h", lost_fraction(4 * HOUR, c, mtbf, rr), "fraction", "time lost saving every 4 hours")
    ex_c, ex_m = 120.0, 6 * HOUR  # a worked problem's inputs
    r.add("example_save_seconds", ex_c, "s", "worked problem: C")
    r.add("example_mtbf_hours", ex_m / HOUR, "h", "worked problem: M")
    r.add("example_young_seconds", young_seconds(ex_c, ex_m), "s", "worked problem: Young")
    r.add("example_daly_seconds", daly_seconds(ex_c, ex_m), "s", "worked problem: Daly")
    r.add("example_lost", lost_fraction(daly_seconds(ex_c, ex_m), ex_c, ex_m), "fraction", "worked problem: lost")
    r.claim("Daly's interval is the exact optimum", daly, exact, rel_tol=0.01, unit="s",
            formula="Daly 2006 vs golden-section search on T(τ)")

    rng = np.random.default_rng(2006)
    factors = 2.0 ** np.arange(-2, 2.01, 0.25)  # 1/4 x to 4 x Young
    work, jobs = 40 * mtbf, 400
    lost_mc, lost_exact = [], []
    for k in factors:
        tau = k * young
        walls = simulate_jobs(work, tau, c, mtbf, rr, jobs, np.random.default_rng(rng.integers(2**32)))
        lost_mc.append(1 - work / walls.mean())
        lost_exact.append(1 - work / expected_wall_seconds(work, tau, c, mtbf, rr))
    lost_mc, lost_exact = np.array(lost_mc), np.array(lost_exact)
    i = int(np.argmin(lost_mc))
    i = min(max(i, 2), len(factors) - 3)  # a parabola in log(tau) through the 5 points around the minimum
    u = np.log(factors[i - 2:i + 3] * young)
    a2, a1, _ = np.polyfit(u, lost_mc[i - 2:i + 3], 2)
    mc_opt = math.exp(-a1 / (2 * a2)) if a2 > 0 else factors[i] * young
    r.add("mc_optimum_seconds", mc_opt, "s", "Monte Carlo optimum (parabola through the minimum)")
    r.add("mc_jobs", jobs, "", "simulated jobs per interval")
    r.add("mc_work_hours", work / HOUR, "h", "useful work per simulated job")
    worst = float(np.max(np.abs(lost_mc - lost_exact) / lost_exact))
    r.add("mc_worst_gap", worst, "fraction", "largest relative gap, Monte Carlo vs exact")
    r.claim("Monte Carlo lost fraction = Daly's exact T(τ), every interval", worst, 0.05, relation="<=",
            unit="fraction", formula=f"max relative gap over {len(factors)} intervals, {jobs} jobs each")
    r.claim("Monte Carlo optimum = Daly's interval", mc_opt, daly, rel_tol=0.25, unit="s",
            formula="parabola in log τ through the 5 sweep points around the Monte Carlo minimum")
    r.table("sweep", ["interval (× Young)", "interval", "lost, Monte Carlo", "lost, exact", "lost, first order"],
            [[f"{k:.3g}", f"{k * young / 60:.0f} min", f"{100 * m:.2f} %", f"{100 * e:.2f} %",
              f"{100 * first_order_lost_fraction(k * young, c, mtbf, rr):.2f} %"]
             for k, m, e in zip(factors[::2], lost_mc[::2], lost_exact[::2])],
            caption=f"C = {c:.0f} s, R = {rr:.0f} s, M = {mtbf / HOUR:.2f} h; {jobs} jobs of {work / HOUR:.0f} h work")
    _figure(r, factors * young, lost_mc, lost_exact, young, daly, mtbf)
    return r


def _figure(r, taus, lost_mc, lost_exact, young, daly, mtbf) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.semilogx(taus / 60, 100 * lost_exact, "-", label="exact (Daly's T(τ))")
    ax.semilogx(taus / 60, 100 * lost_mc, "o", label="Monte Carlo")
    ax.axvline(young / 60, color="gray", ls=":", label="Young √(2CM)")
    ax.axvline(daly / 60, color="black", ls="--", label="Daly")
    ax.set_xlabel("checkpoint interval (minutes)")
    ax.set_ylabel("time lost (%)")
    minutes = taus / 60
    ax.set_xticks([t for t in (2, 5, 10, 20, 50, 100, 200, 500) if minutes.min() <= t <= minutes.max()])
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8, loc="upper center")
    r.figure("sweep", fig, f"Fraction of wall time lost vs checkpoint interval (M = {mtbf / HOUR:.2f} h)")


# ---------------------------------------------------------------- CLI
def _non_negative(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def _positive_finite(text: str) -> float:
    """argparse type: a finite number > 0 (an infinite save time or MTBF has no interval)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


@command("checkpoint-interval", "how often to checkpoint: Young's and Daly's intervals and the time lost")
def checkpoint_interval_command(argv: list[str]) -> int:
    p = parser("checkpoint-interval", "Optimal checkpoint interval from the save time and the job's mean time\n"
               "between failures (Young 1974, Daly 2006), with the expected fraction of time lost.")
    p.add_argument("--save-seconds", type=_positive_finite, required=True, help="C: seconds to write a checkpoint")
    p.add_argument("--mtbf-hours", type=_positive_finite, required=True, help="M: the job's mean time between failures")
    p.add_argument("--restart-seconds", type=_non_negative, default=0.0, help="R: seconds to restart (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    c, m, rr = args.save_seconds, args.mtbf_hours * HOUR, args.restart_seconds
    young, daly = young_seconds(c, m), daly_seconds(c, m)
    out = {
        "save_seconds": c, "mtbf_seconds": m, "restart_seconds": rr,
        "young_seconds": young, "daly_seconds": daly, "optimal_seconds": optimal_seconds(c, m),
        "lost_fraction": lost_fraction(daly, c, m, rr), "lost_fraction_young": lost_fraction(young, c, m, rr),
        "first_order_lost_fraction": first_order_lost_fraction(young, c, m, rr),
    }
    note = "\nwarning: the save takes longer than the MTBF; checkpointing alone cannot make progress safe" \
        if c >= m else ""
    text = (f"checkpoint every {daly / 60:.1f} min of work (Daly; Young: {young / 60:.1f} min)\n"
            f"expected time lost: {100 * out['lost_fraction']:.2f} % "
            f"(C = {c:g} s, M = {args.mtbf_hours:g} h, R = {rr:g} s){note}")
    emit(out, args.json, text)
    return 0
