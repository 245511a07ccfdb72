"""A real state-dict save (its bytes/s), Young's and Daly's intervals, and a Monte Carlo of jobs with failures
(experiment checkpoint-interval), against the formulas of distlab.throughput.young_daly.
"""

from __future__ import annotations

import math
import os
import tempfile
import time

import numpy as np
import torch

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.memory.model_states import add_state_bytes, checkpoint_bytes_per_param
from distlab.models.gpt import GPT, GPTConfig, param_count, random_batch
from distlab.models.shapes import preset
from distlab.throughput import checkpoint_checks
from distlab.throughput.young_daly import (
    HOUR,
    daly_seconds,
    expected_wall_seconds,
    first_order_lost_fraction,
    first_order_optimal_seconds,
    llama3_interruptions,
    llama3_mtbf_seconds,
    lost_fraction,
    optimal_seconds,
    young_seconds,
)


# ---------------------------------------------------------------- Monte Carlo
def simulate_job_naive(
    work_s: float, interval_s: float, save_s: float, mtbf_s: float, restart_s: float, rng: np.random.Generator
) -> float:
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


def simulate_jobs(
    work_s: float,
    interval_s: float,
    save_s: float,
    mtbf_s: float,
    restart_s: float,
    jobs: int,
    rng: np.random.Generator,
) -> np.ndarray:
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
    return {
        "bytes": size,
        "seconds": best,
        "params": param_count(cfg),
        "bytes_per_s": size / best,
        "param_tensors": len(list(model.parameters())),
    }


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
    r.add("file_bytes_per_param", checkpoint_bytes_per_param("fp32"), "B", "fp32 AdamW checkpoint: weights, m, v")
    r.claim(
        "checkpoint bytes = 12 B/param (fp32 weights, m, v)",
        save["bytes"] / save["params"],
        checkpoint_bytes_per_param("fp32"),
        rel_tol=0.02,
        unit="B/param",
        formula="4 + 4 + 4; ≤ 2 % for step counters, names and pickle framing",
    )
    per = checkpoint_bytes_per_param("mixed")  # bf16 weights + fp32 master, m, v
    seven_b_state = per * preset("7B").params()
    add_state_bytes(r)  # checkpoint_bytes_per_param, claimed against the ZeRO paper's 2 + K
    r.add("seven_b_state_bytes", seven_b_state, "B", "7B training state (no gradients)")
    r.add("seven_b_save_seconds", seven_b_state / save["bytes_per_s"], "s", "7B state at this machine's rate")

    mtbf = llama3_mtbf_seconds()
    c, rr = SCENARIO_SAVE_S, SCENARIO_RESTART_S
    unexpected, every = llama3_interruptions()
    r.add("interruptions", unexpected, "interruptions", "Llama 3 405B, 54-day snapshot: unexpected interruptions")
    r.add("interruptions_all", every, "interruptions", "... all interruptions (planned ones included)")
    r.claim("Llama 3: the unexpected interruptions are a part of all of them", unexpected, every, relation="<=")
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
    r.claim(
        "Young's √(2CM) = the numerical minimiser of the first-order overhead C/τ + (τ+C)/2M",
        young,
        first_order_optimal_seconds(c, mtbf),
        rel_tol=1e-6,
        unit="s",
        formula="golden-section search, no square root",
    )
    r.claim(
        "worked problem: Young's √(2CM) = the first-order minimiser",
        young_seconds(ex_c, ex_m),
        first_order_optimal_seconds(ex_c, ex_m),
        rel_tol=1e-6,
        unit="s",
    )
    r.claim(
        "worked problem: Daly's interval = the exact optimum",
        daly_seconds(ex_c, ex_m),
        optimal_seconds(ex_c, ex_m),
        rel_tol=0.01,
        unit="s",
    )
    for label, tau in (("hourly", HOUR), ("every 4 hours", 4 * HOUR)):
        r.claim(
            f"time lost saving {label}: closed form = the expected wall time of a whole job",
            lost_fraction(tau, c, mtbf, rr),
            1 - 40 * tau / expected_wall_seconds(40 * tau, tau, c, mtbf, rr),
            rel_tol=1e-9,
            formula="1 - τ / (M e^(R/M) (e^((τ+C)/M) - 1)) against a 40-segment job",
        )
    r.claim(
        "Daly's interval is the exact optimum",
        daly,
        exact,
        rel_tol=0.01,
        unit="s",
        formula="Daly 2006 vs golden-section search on T(τ)",
    )

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
    u = np.log(factors[i - 2 : i + 3] * young)
    a2, a1, _ = np.polyfit(u, lost_mc[i - 2 : i + 3], 2)
    mc_opt = math.exp(-a1 / (2 * a2)) if a2 > 0 else factors[i] * young
    r.add("mc_optimum_seconds", mc_opt, "s", "Monte Carlo optimum (parabola through the minimum)")
    r.add("mc_jobs", jobs, "", "simulated jobs per interval")
    r.add("mc_work_hours", work / HOUR, "h", "useful work per simulated job")
    worst = float(np.max(np.abs(lost_mc - lost_exact) / lost_exact))
    r.add("mc_worst_gap", worst, "fraction", "largest relative gap, Monte Carlo vs exact")
    r.claim(
        "Monte Carlo lost fraction = Daly's exact T(τ), every interval",
        worst,
        0.05,
        relation="<=",
        unit="fraction",
        formula=f"max relative gap over {len(factors)} intervals, {jobs} jobs each",
    )
    r.claim(
        "Monte Carlo optimum = Daly's interval",
        mc_opt,
        daly,
        rel_tol=0.25,
        unit="s",
        formula="parabola in log τ through the 5 sweep points around the Monte Carlo minimum",
    )
    r.table(
        "sweep",
        ["interval (× Young)", "interval", "lost, Monte Carlo", "lost, exact", "lost, first order"],
        [
            [
                f"{k:.3g}",
                f"{k * young / 60:.0f} min",
                f"{100 * m:.2f} %",
                f"{100 * e:.2f} %",
                f"{100 * first_order_lost_fraction(k * young, c, mtbf, rr):.2f} %",
            ]
            for k, m, e in zip(factors[::2], lost_mc[::2], lost_exact[::2])
        ],
        caption=f"C = {c:.0f} s, R = {rr:.0f} s, M = {mtbf / HOUR:.2f} h; {jobs} jobs of {work / HOUR:.0f} h work",
    )
    ax = _figure(r, factors * young, lost_mc, lost_exact, young, daly, mtbf)
    checkpoint_checks.simulators_claim(r, simulate_job_naive, simulate_jobs)
    checkpoint_checks.scalars_claim(r, jobs=jobs, work_mtbfs=40)
    checkpoint_checks.sweep_claims(r, ax, young_s=young, factors=factors, jobs=jobs, work_mtbfs=40)
    return r


def _figure(r, taus, lost_mc, lost_exact, young, daly, mtbf):
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
    return ax
