"""stragglers: a synchronous step ends when its slowest rank does.

With N ranks whose step times are independent draws T_i = mu + sigma * Z_i, the step takes max_i T_i, and

    E[step] = mu + sigma * E[Z_(N)],   E[Z_(N)] = integral of z * N * phi(z) * Phi(z)^(N-1) dz

(the expected largest of N standard normals, an order statistic: about sqrt(2 ln N) for large N). Jitter
that costs nothing on one GPU costs sigma * E[Z_(N)] on thousands. Rare hiccups (a rank loses delta with
probability p per step: a page fault storm, a GC pause, an ECC retry) hit almost every step once
N * p is near 1: E[step] = mu + delta * (1 - (1 - p)^N). And one slow node (a throttled GPU, a bad
NIC) sets the pace of all of them: E[step] >= its own time, however many fast ranks there are.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.throughput import stragglers_checks

# A scenario, not a fact: a 1 s step with 2 % per-rank jitter, rare 0.5 s hiccups at 1 in 2000 steps,
# and one node of 8 GPUs running 10 % slow.
MEAN_S, JITTER = 1.0, 0.02
HICCUP_P, HICCUP_S = 5e-4, 0.5
SLOW_FACTOR, GPUS_PER_NODE = 1.10, 8
RANKS = [2**k for k in range(15)]  # 1 ... 16384


@functools.cache
def _normal_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = np.linspace(-12.0, 12.0, 48_001)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in z])  # Phi(z), accurate in both tails
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return z, cdf, pdf


def expected_max_standard_normal(n: int) -> float:
    """E[max of n iid N(0, 1)] by numerical integration of z * n * phi(z) * Phi(z)^(n-1)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    z, cdf, pdf = _normal_grid()
    f = z * n * pdf * cdf ** (n - 1)
    return float(np.sum((f[1:] + f[:-1]) * np.diff(z)) / 2)


def expected_step_jitter(n: int, mean_s: float = MEAN_S, jitter: float = JITTER) -> float:
    return mean_s * (1 + jitter * expected_max_standard_normal(n))


def expected_step_hiccups(n: int, mean_s: float = MEAN_S, p: float = HICCUP_P, delta_s: float = HICCUP_S) -> float:
    """Mean step with rare hiccups only: one rank's hiccup stalls everyone."""
    return mean_s + delta_s * (1 - (1 - p) ** n)


def simulate_steps(
    n: int,
    steps: int,
    rng: np.random.Generator,
    *,
    jitter: float = JITTER,
    p: float = 0.0,
    delta_s: float = 0.0,
    slow_ranks: int = 0,
    slow_factor: float = 1.0,
) -> np.ndarray:
    """Step times of `steps` synchronous steps on n ranks: the max over ranks of each rank's time.
    The first `slow_ranks` ranks are `slow_factor` times slower. Drawn in blocks to bound memory."""
    out = np.empty(steps)
    block = max(1, 2_000_000 // n)
    scale = np.ones(n)
    scale[:slow_ranks] = slow_factor
    for start in range(0, steps, block):
        k = min(block, steps - start)
        noise = jitter * rng.standard_normal((k, n)) if jitter else np.zeros((k, n))
        t = MEAN_S * scale * (1 + noise)  # (steps, ranks)
        if p > 0:
            t += delta_s * (rng.random((k, n)) < p)
        out[start : start + k] = t.max(axis=1)
    return out


@experiment(
    "stragglers", "simulated synchronous steps: the max of N ranks' times vs order statistics", kind="simulated"
)
def stragglers(device: str) -> Result:
    r = Result("stragglers")
    rng = np.random.default_rng(1925)  # Tippett's year: the first tables of E[Z_(N)]
    steps = 400
    hiccup_steps = 4 * steps  # a hiccup is rare: four times the steps for its mean
    r.add("mean_s", MEAN_S, "s", "scenario: mean step time of one rank")
    r.add("jitter", JITTER, "fraction", "scenario: per-rank step-time standard deviation / mean")
    r.add("hiccup_p", HICCUP_P, "", "scenario: chance a rank hiccups in a step")
    r.add("hiccup_s", HICCUP_S, "s", "scenario: hiccup length")
    r.add("slow_factor", SLOW_FACTOR, "", "scenario: the slow node's step time / normal")
    r.add("steps", steps, "", "simulated steps per point")
    sims = {"jitter": [], "hiccups": [], "slow node": []}
    for n in RANKS:
        sims["jitter"].append(simulate_steps(n, steps, rng).mean())
        sims["hiccups"].append(simulate_steps(n, hiccup_steps, rng, jitter=0.0, p=HICCUP_P, delta_s=HICCUP_S).mean())
        slow = min(GPUS_PER_NODE, n)
        sims["slow node"].append(simulate_steps(n, steps, rng, slow_ranks=slow, slow_factor=SLOW_FACTOR).mean())
    form_jitter = [expected_step_jitter(n) for n in RANKS]
    form_hiccup = [expected_step_hiccups(n) for n in RANKS]
    i = RANKS.index(1024)
    ez = expected_max_standard_normal(1024)
    r.add("ez_1024", ez, "", "E[Z_(1024)]: expected largest of 1024 standard normals")
    r.add("jitter_slowdown_1024", form_jitter[i] / MEAN_S - 1, "fraction", "jitter's cost at 1024 ranks (formula)")
    r.add("jitter_slowdown_16384", form_jitter[-1] / MEAN_S - 1, "fraction", "jitter's cost at 16384 ranks")
    r.add("hiccup_hit_1024", 1 - (1 - HICCUP_P) ** 1024, "fraction", "steps hit by a hiccup at 1024 ranks")
    r.add("hiccup_slowdown_1024", form_hiccup[i] / MEAN_S - 1, "fraction", "hiccups' cost at 1024 ranks")
    r.add(
        "slow_node_slowdown_1024",
        sims["slow node"][i] / MEAN_S - 1,
        "fraction",
        "one slow node's cost at 1024 ranks (simulated)",
    )
    r.add("sqrt_2ln_1024", math.sqrt(2 * math.log(1024)), "", "sqrt(2 ln N) at N = 1024 (the large-N growth)")
    sim_excess = (sims["jitter"][i] / MEAN_S - 1) / JITTER
    r.claim(
        "jitter at N = 1024: simulated (E[step] - mu) / sigma = E[Z_(N)]",
        sim_excess,
        ez,
        rel_tol=0.03,
        formula="expected maximum of N normals (order statistics), numerically integrated",
    )
    r.claim(
        "hiccups: simulated E[step] at N = 1024 = mu + delta·(1 - (1-p)^N)",
        sims["hiccups"][i],
        form_hiccup[i],
        rel_tol=0.02,
        unit="s",
        formula="one rank's hiccup stalls the step",
    )
    r.claim(
        "one slow node sets the pace: E[step] >= its own mean, at every N",
        min(s / (SLOW_FACTOR * MEAN_S) for s in sims["slow node"]),
        1.0,
        relation=">=",
        rel_tol=0.005,
        formula="max over ranks ≥ the slow ranks' time",
    )
    rows = [
        [
            n,
            f"{sims['jitter'][k]:.4f}",
            f"{form_jitter[k]:.4f}",
            f"{sims['hiccups'][k]:.4f}",
            f"{form_hiccup[k]:.4f}",
            f"{sims['slow node'][k]:.4f}",
        ]
        for k, n in enumerate(RANKS)
        if n in (1, 8, 64, 1024, 16384)
    ]
    r.table(
        "steps",
        [
            "ranks N",
            "jitter: simulated (s)",
            "jitter: formula (s)",
            "hiccups: simulated (s)",
            "hiccups: formula (s)",
            "one slow node: simulated (s)",
        ],
        rows,
        caption=f"Mean step time, {steps} simulated steps per point ({hiccup_steps} for hiccups); the slow node is "
        f"{GPUS_PER_NODE} GPUs {SLOW_FACTOR:.2f}x slow",
    )
    ax = _figure(r, sims, form_jitter, form_hiccup)
    stragglers_checks.scalars_claim(r)
    stragglers_checks.slow_node_claim(r, GPUS_PER_NODE, SLOW_FACTOR)
    stragglers_checks.table_and_figure_claim(r, ax, RANKS, GPUS_PER_NODE, SLOW_FACTOR)
    return r


def _figure(r: Result, sims: dict, form_jitter: list, form_hiccup: list):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.semilogx(RANKS, sims["jitter"], "o", color="C0", label=f"jitter σ = {100 * JITTER:.0f} %: simulated")
    ax.semilogx(RANKS, form_jitter, "-", color="C0", label="μ + σ·E[Z_(N)]")
    ax.semilogx(RANKS, sims["hiccups"], "s", color="C1", label="rare hiccups: simulated")
    ax.semilogx(RANKS, form_hiccup, "-", color="C1", label="μ + δ·(1 − (1 − p)^N)")
    ax.semilogx(RANKS, sims["slow node"], "^-", color="C3", label=f"jitter + one node {SLOW_FACTOR:.2f}x slow")
    ax.set_xlabel("synchronous ranks N")
    ax.set_ylabel("mean step time (s)")
    ax.legend(fontsize=7)
    r.figure(
        "step_vs_ranks", fig, "Mean synchronous step time vs number of ranks: every step waits for the slowest rank"
    )
    return ax
