"""Chapter 10's straggler numbers worked a second way: the expected largest of N standard normals as
E[Z_(N)] = ∫_0^∞ [1 − Φ(z)^N − Φ(−z)^N] dz (the tail form, Simpson's rule on its own grid), not the module's
∫ z N φ(z) Φ(z)^(N−1) dz; a step with one slow node as the mean of the largest of a mixture, ∫ (1 − F(t)) dt with
F(t) = Φ((t/(s μ) − 1)/σ)^k · Φ((t/μ − 1)/σ)^(N−k); the hiccup share as −expm1(N log1p(−p)).

Each function compares what the stragglers experiment put in its Result (its numbers, table and figure) with these
references, as claims.
"""

from __future__ import annotations

import math
import re

import numpy as np

from distlab.core.results import Result


def _phi(x: np.ndarray) -> np.ndarray:
    """Φ(x) in float64 by math.erfc, accurate in both tails."""
    return np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in np.ravel(x)]).reshape(np.shape(x))


def _simpson(f: np.ndarray, h: float) -> float:
    """Composite Simpson's rule over an odd number of equally spaced samples."""
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


_Z = np.linspace(0.0, 13.0, 26_001)  # step 5e-4; Φ(−13) ~ 6e-39: nothing beyond
_PHI_POS, _PHI_NEG = None, None


def expected_max_normal(n: int) -> float:
    """E[Z_(N)] = ∫_0^∞ (1 − F(z)) dz − ∫_−∞^0 F(z) dz with F = Φ^N, the second integral mirrored."""
    global _PHI_POS, _PHI_NEG
    if _PHI_POS is None:
        _PHI_POS, _PHI_NEG = _phi(_Z), _phi(-_Z)
    return _simpson(1.0 - _PHI_POS**n - _PHI_NEG**n, _Z[1] - _Z[0])


def expected_step_slow_node(n: int, slow: int, factor: float, mean_s: float, jitter: float) -> float:
    """E[max over ranks] when `slow` of the n ranks take factor x mean_s, all with relative jitter σ: the largest of
    independent normals, E[T] = t0 + ∫_t0^∞ (1 − F(t)) dt for T >= t0 (t0 = 20 σ below the mean)."""
    lo, hi = mean_s * (1 - 20 * jitter), factor * mean_s * (1 + 20 * jitter)
    t = np.linspace(lo, hi, 40_001)
    cdf = _phi((t / (factor * mean_s) - 1) / jitter) ** slow * _phi((t / mean_s - 1) / jitter) ** (n - slow)
    return lo + _simpson(1.0 - cdf, t[1] - t[0])


def scalars_claim(r: Result) -> None:
    """E[Z_(1024)] by the tail integral, σ E[Z_(N)] at 1024 and 16384 ranks, the hiccup share −expm1(N log1p(−p)) and
    its cost δ/μ times it, √(2 ln 1024) with ln 1024 = 10 ln 2: the largest relative gap."""
    q = {k: v.value for k, v in r.quantities.items()}
    mu, sigma, p, delta = q["mean_s"], q["jitter"], q["hiccup_p"], q["hiccup_s"]
    e1024, e16384 = expected_max_normal(1024), expected_max_normal(16384)
    hit = -math.expm1(1024 * math.log1p(-p))
    pairs = [
        (q["ez_1024"], e1024),
        (q["jitter_slowdown_1024"], sigma * e1024),
        (q["jitter_slowdown_16384"], sigma * e16384),
        (q["hiccup_hit_1024"], hit),
        (q["hiccup_slowdown_1024"], delta / mu * hit),
        (q["sqrt_2ln_1024"], math.sqrt(20 * 0.6931471805599453)),
    ]
    r.claim(
        "E[Z_(N)], jitter and hiccup costs by hand (largest gap)",
        max(abs(a / b - 1) for a, b in pairs),
        0.0,
        abs_tol=1e-6,
    )


def slow_node_claim(r: Result, gpus_per_node: int, slow_factor: float) -> None:
    """The simulated slow-node cost at 1024 ranks within 0.5 % of a step of the mixture's expected maximum (400 steps:
    its standard error is about σ s μ · 0.6 / √400 ≈ 0.07 %, the bound is 7 of them, whatever the seed)."""
    q = {k: v.value for k, v in r.quantities.items()}
    ref = expected_step_slow_node(1024, gpus_per_node, slow_factor, q["mean_s"], q["jitter"])
    r.claim(
        "one slow node at 1024 ranks = the mixture's E[max] by hand",
        q["slow_node_slowdown_1024"],
        ref / q["mean_s"] - 1,
        abs_tol=0.005,
    )


def table_and_figure_claim(r: Result, ax, ranks: list[int], gpus_per_node: int, slow_factor: float) -> None:
    """The table's cells and the figure's drawn points against the references above: formulas to the printed
    digit, simulated points within their sampling error (jitter and slow node 0.5 %, 400 steps; hiccups 2 %, 1600
    steps: at 1024 ranks a 40 % hit share gives a standard error of 0.6 % of a step)."""
    q = {k: v.value for k, v in r.quantities.items()}
    mu, sigma, p, delta = q["mean_s"], q["jitter"], q["hiccup_p"], q["hiccup_s"]
    jit = {n: mu * (1 + sigma * expected_max_normal(n)) for n in ranks}
    hic = {n: mu + delta * -math.expm1(n * math.log1p(-p)) for n in ranks}
    slow = {n: expected_step_slow_node(n, min(gpus_per_node, n), slow_factor, mu, sigma) for n in ranks}
    exact, sampled = [], []  # (drawn or printed, reference, tolerance)
    for row in r.tables["steps"].rows:
        n = int(row[0])
        cells = [float(c) for c in row[1:]]
        exact += [(cells[1], jit[n], 5e-5 + 1e-7), (cells[3], hic[n], 5e-5 + 1e-7)]
        sampled += [(cells[0], jit[n], 0.005), (cells[2], hic[n], 0.02), (cells[4], slow[n], 0.005)]
    drawn = 0
    for line in ax.get_lines():
        label, xs, ys = line.get_label(), [int(x) for x in line.get_xdata()], line.get_ydata()
        ref = hic if label.startswith("rare hiccups") or label.startswith("μ + δ") else jit
        ref = slow if label.startswith("jitter +") else ref
        simulated = label.endswith("simulated") or label.startswith("jitter +")
        tol = (0.02 if ref is hic else 0.005) if simulated else 1e-7
        (sampled if simulated else exact).extend((y, ref[x], tol) for x, y in zip(xs, ys))
        drawn += len(xs)
    labels = " ".join(line.get_label() for line in ax.get_lines())
    sig, node = re.search(r"σ = ([\d.]+) %", labels), re.search(r"one node ([\d.]+)x", labels)
    assert sig is not None and node is not None, labels
    excess = [abs(a - b) - tol for a, b, tol in exact]
    excess += [abs(float(sig.group(1)) - round(100 * sigma)), abs(float(node.group(1)) - round(slow_factor, 2))]
    excess.append(abs(drawn - 5 * len(ranks)))  # 5 curves x the ranks swept
    r.claim(
        "stragglers table and figure: formulas, legend, points (largest excess)",
        max(excess),
        0.0,
        relation="<=",
        abs_tol=1e-12,
    )
    r.claim(
        "stragglers: simulated steps within their sampling error (largest excess)",
        max(abs(a - b) / b - tol for a, b, tol in sampled),
        0.0,
        relation="<=",
    )
