"""collective-fit: time real collectives across message sizes and fit the alpha-beta model to them.

On CPU: gloo over loopback TCP between processes of this machine. On CUDA: NCCL between the GPUs of
one machine (it needs at least two). On CUDA, timing follows nccl-tests: a barrier, then `iters` back-to-back
operations timed together (launches are asynchronous). On CPU, gloo's calls return when they are done, so each
operation is timed alone and the fastest of `iters` kept: a mean over back-to-back calls on a loaded 2-core
machine averages in every wait for the peer to be scheduled (1 KiB measured at 3.1 ms, 16 KiB at 0.12 ms in one
run at load average 14). Both keep the slowest rank's time. Unlike nccl-tests (which average on a dedicated
machine) we keep the *best* of SAMPLES samples: on a shared machine, interference from other processes only ever
adds time, so the minimum is the estimate of the uncontended cost, and the median drifts with whatever else runs.
The fit minimises *relative* residuals, because the sizes span five orders of magnitude and an absolute
fit would ignore every small message.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.hardware.collectives import bus_bandwidth_factor, steps_and_factor, time_seconds
from distlab.runtime.launcher import launch

KIB = 1024
SIZES = [KIB * 4**i for i in range(9)]  # 1 KiB ... 64 MiB
OPS = ("all-reduce", "broadcast", "all-gather")
SAMPLES = 9


def iterations(message_bytes: int) -> int:
    """Back-to-back operations per timed sample: many for small messages, one for large ones."""
    return 50 if message_bytes <= 64 * KIB else 5 if message_bytes <= 1024 * KIB else 1


def _run_op(op: str, buf: torch.Tensor, parts: list[torch.Tensor], mine: torch.Tensor) -> None:
    if op == "all-reduce":
        dist.all_reduce(buf)
    elif op == "broadcast":
        dist.broadcast(buf, 0)
    else:  # all-gather: S is the whole gathered output (nccl-tests' convention), each rank gives S / p
        dist.all_gather(parts, mine)


def check_collectives(rank: int, world: int, elements: int) -> dict[str, list[float]]:
    """Rank function for tests: run each timed operation once on rank-dependent data and return what
    this rank ends with, so a test can check that what we time really is the collective it claims."""
    buf = torch.full((elements,), float(rank + 1))
    parts = list(torch.empty(elements - elements % world).chunk(world))
    mine = torch.full_like(parts[0], float(rank + 1))
    out = {}
    for op in OPS:
        b = buf.clone()
        _run_op(op, b, parts, mine)
        out[op] = (torch.cat(parts) if op == "all-gather" else b).tolist()
    return out


def time_collectives(
    rank: int, world: int, sizes: list[int], ops: tuple[str, ...], samples: int, device: str
) -> dict[str, dict[int, list[float]]]:
    """Rank function: seconds per operation, per op and size, `samples` samples each (sizes interleaved,
    so a burst of load from elsewhere spreads over all sizes instead of ruining one)."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    bufs = {}
    for s in sizes:
        n = s // 4  # float32 elements
        buf = torch.ones(n, device=dev)
        parts = list(torch.empty(n - n % world, device=dev).chunk(world))
        bufs[s] = (buf, parts, torch.ones_like(parts[0]))
    out: dict[str, dict[int, list[float]]] = {op: {s: [] for s in sizes} for op in ops}
    for op in ops:  # warm-up: connections, buffers, NCCL's first-call set-up
        _run_op(op, *bufs[sizes[0]])
        _run_op(op, *bufs[sizes[-1]])
    sync()
    for _ in range(samples):
        for s in sizes:
            for op in ops:
                iters = iterations(s)
                dist.barrier()
                sync()
                if device == "cuda":  # nccl-tests' way: launches are asynchronous, time them together
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        _run_op(op, *bufs[s])
                    sync()
                    out[op][s].append((time.perf_counter() - t0) / iters)
                else:  # gloo's calls return when done: time each, keep the fastest (see the module docstring)
                    fastest = float("inf")
                    for _ in range(iters):
                        t0 = time.perf_counter()
                        _run_op(op, *bufs[s])
                        fastest = min(fastest, time.perf_counter() - t0)
                    out[op][s].append(fastest)
    return out


def combine(per_rank: list[dict]) -> dict[str, dict[int, float]]:
    """Slowest rank per sample (a collective ends when its last rank does), then the best sample."""
    ops = per_rank[0].keys()
    return {
        op: {s: min(max(samples) for samples in zip(*(r[op][s] for r in per_rank))) for s in per_rank[0][op]}
        for op in ops
    }


def fit_alpha_beta(sizes, seconds, op: str, ranks: int) -> tuple[float, float, np.ndarray]:
    """Fit t = steps * alpha + factor * S / B by least squares on relative residuals.

    Returns (alpha_s, bandwidth_bytes_per_s, relative residuals (measured - fit) / fit).
    """
    steps, factor = steps_and_factor(op, ranks)
    s = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    design = np.stack([np.full_like(s, steps), factor * s], axis=1) / t[:, None]  # rows divided by t
    (alpha, inv_bw), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if not (alpha > 0 and inv_bw > 0):
        raise ValueError(f"fit gave non-physical alpha={alpha:.3g} s, 1/B={inv_bw:.3g} s/B")
    fitted = steps * alpha + factor * s * inv_bw
    return float(alpha), float(1 / inv_bw), (t - fitted) / fitted


@experiment("collective-fit", "real gloo (CPU) or NCCL (GPU) collectives, 1 KiB to 64 MiB, fitted to alpha-beta")
def collective_fit(device: str) -> Result:
    r = Result("collective-fit")
    world = 2 if device == "cpu" else torch.cuda.device_count()
    r.add("ranks", world, "ranks", "processes in the measured world")
    if world < 2:
        r.table("measured", ["note"], [["one GPU only: NCCL needs two GPUs for a collective to cross a link"]])
        return r
    per_rank = launch(time_collectives, world, SIZES, OPS, SAMPLES, device, device=device, timeout_s=300)
    med = combine(per_rank)
    ar = med["all-reduce"]
    alpha, bw, resid = fit_alpha_beta(SIZES, [ar[s] for s in SIZES], "all-reduce", world)
    steps, _ = steps_and_factor("all-reduce", world)
    r.add("alpha_s", alpha, "s", "fitted latency per step")
    r.add("call_latency_s", steps * alpha, "s", "fitted all-reduce latency (steps x alpha)")
    r.add("bandwidth_bytes_per_s", bw, "B/s", "fitted bandwidth per direction")
    r.add("median_abs_residual", float(np.median(np.abs(resid))), "fraction", "median |relative residual|")
    r.add("max_abs_residual", float(np.max(np.abs(resid))), "fraction", "largest |relative residual|")
    half = steps * alpha * bw / bus_bandwidth_factor("all-reduce", world)
    r.add("half_bandwidth_bytes", half, "B", "message size where latency and bandwidth terms are equal (n_1/2)")
    rows = []
    for s, e in zip(SIZES, resid):
        t = ar[s]
        rows.append(
            [
                _size(s),
                t * 1e6,
                t * 1e6 / (1 + e),
                f"{100 * e:+.0f} %",
                s / t / 1e9,
                s / t * bus_bandwidth_factor("all-reduce", world) / 1e9,
            ]
        )
    r.table(
        "allreduce",
        ["message", "measured (µs)", "fit (µs)", "residual", "algbw (GB/s)", "busbw (GB/s)"],
        rows,
        caption=f"all-reduce on {world} ranks: slowest rank, best of {SAMPLES} samples",
    )
    other_rows = []
    for op in OPS[1:]:
        for s in SIZES[-3:]:
            pred = time_seconds(op, s, world, alpha_s=alpha, bandwidth_bytes_per_s=bw)
            other_rows.append([op, _size(s), med[op][s] * 1e3, pred * 1e3, med[op][s] / pred])
            r.add(f"{op}_{s // (KIB * KIB)}mib_ratio", med[op][s] / pred, "", f"{op}: measured / predicted")
    r.table(
        "others",
        ["op", "message", "measured (ms)", "predicted from the all-reduce fit (ms)", "ratio"],
        other_rows,
        caption="The all-reduce fit, applied to other collectives through their step and byte "
        "counts: a ratio far from 1 is the implementation, not the wire",
    )
    # The model's two regimes, measured: flat below n_1/2, linear above it.
    small = ar[SIZES[2]] / ar[SIZES[0]]
    large = ar[SIZES[-1]] / ar[SIZES[-3]]
    r.add("small_ratio", small, "", "t(16 KiB) / t(1 KiB)")
    r.add("large_ratio", large, "", "t(64 MiB) / t(4 MiB)")
    # The latency regime is claimed through the fit (all nine sizes), not through two single points: on a
    # loaded 2-core machine one small message can take 3x another of the same cost.
    r.claim(
        "latency regime: the fitted n_1/2 is at least 16 KiB (small messages cost their latency)",
        half,
        SIZES[2],
        relation=">=",
        unit="B",
        kind="timing",
        formula="n_1/2 = steps·α·B / factor",
    )
    r.claim(
        "bandwidth regime starts within the sweep: the fitted n_1/2 is at most 16 MiB",
        half,
        SIZES[-2],
        relation="<=",
        unit="B",
        kind="timing",
        formula="n_1/2 = steps·α·B / factor",
    )
    # Over 16x the bytes, as the exponent of t ∝ S^k: 1 in the bandwidth regime, 0 in the latency one. The band
    # is wide because under load 64 MiB also pays for the cache it no longer fits in (t(64 MiB)/t(4 MiB) = 28
    # seen with two CPU hogs running, k = 1.2); a latency-bound or wrongly timed collective gives k near 0.
    exponent = float(np.log(large) / np.log(SIZES[-1] / SIZES[-3]))
    r.add("large_exponent", exponent, "", "k in t ∝ S^k from 4 MiB to 64 MiB")
    r.claim(
        "bandwidth regime: time grows about linearly with bytes, 4 MiB -> 64 MiB (exponent k, 1 ideal)",
        exponent,
        1.0,
        abs_tol=0.5,
        kind="timing",
        formula="t ≈ factor·S/B when S ≫ n_1/2, so k = log(t2/t1) / log(S2/S1) ≈ 1",
    )
    # The fitted constants against estimates that do not use the fit. Bandwidth: each message of 1 MiB or more gives
    # factor·S/t(S) on its own; the fitted B must lie within their range, with a factor of 3 either way. Latency: the
    # 1 KiB all-reduce's time, within a factor of 3. Timing claims: a fit that swapped its two parameters, or a
    # per-call latency reported as per-step, is off by far more. A range, not one size: on a CPU the per-byte cost
    # grows as messages leave the cache, 4.4x from 1 MiB to 64 MiB at load average 14, so the fit (which weighs every
    # size alike) sits between them; the slope between the two largest sizes, used before, is a difference of two
    # noisy times and came out 3.9-4.4x the fit on every attempt at load average 20.
    per_size = [bus_bandwidth_factor("all-reduce", world) * s / ar[s] for s in SIZES if s >= KIB * KIB]
    r.add("largest_size_bandwidth", per_size[-1], "B/s", "bandwidth from the largest message's time alone")
    r.add("smallest_large_size_bandwidth", per_size[0], "B/s", "bandwidth from the 1 MiB message's time alone")
    for what, fitted, direct, formula in (
        (
            "fitted B vs the 1-64 MiB messages' own bytes over time",
            bw,
            min(max(per_size), max(bw, min(per_size))),
            "factor · S / t(S) for S = 1, 4, 16, 64 MiB; the fit's B against the nearest of their range",
        ),
        (
            "fitted per-call latency vs the 1 KiB all-reduce's time",
            steps * alpha,
            ar[SIZES[0]],
            "t(1 KiB) = steps·α + 1 KiB·factor/B ≈ steps·α",
        ),
    ):
        r.claim(
            f"{what}: within a factor of 3",
            max(fitted / direct, direct / fitted),
            3.0,
            relation="<=",
            kind="timing",
            formula=formula,
        )
    # The fit's residuals are reported, not claimed: on a shared 2-core machine a single size can come out
    # 60 % slow in one run and on the line in the next (median residual 8-40 % seen), so no bound on them is
    # robust. The regime claims above are.
    r.data.update(
        sizes=SIZES,
        median_seconds={op: [med[op][s] for s in SIZES] for op in OPS},
        alpha_s=alpha,
        bandwidth_bytes_per_s=bw,
    )
    _figure(r, ar, alpha, bw, resid, world)
    return r


def _size(s: int) -> str:
    return f"{s // KIB} KiB" if s < KIB * KIB else f"{s // (KIB * KIB)} MiB"


def _figure(r: Result, ar: dict, alpha: float, bw: float, resid, world: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = np.array(SIZES, dtype=float)
    grid = np.logspace(np.log10(s[0]), np.log10(s[-1]), 100)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(6.5, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.loglog(s, [ar[x] for x in SIZES], "o", label=f"measured (best of {SAMPLES})")
    ax.loglog(
        grid,
        [time_seconds("all-reduce", x, world, alpha_s=alpha, bandwidth_bytes_per_s=bw) for x in grid],
        "-",
        label=f"fit: α = {alpha * 1e6:.0f} µs/step, B = {bw / 1e9:.2f} GB/s",
    )
    ax.set_ylabel("seconds per all-reduce")
    ax.legend(fontsize=8)
    bx.semilogx(s, 100 * np.asarray(resid), "o-")
    bx.axhline(0, color="gray", lw=0.8)
    bx.set_ylabel("residual (%)")
    bx.set_xlabel("message size (bytes)")
    r.figure(
        "fit",
        fig,
        f"all-reduce time vs message size on {world} ranks, with the alpha-beta fit and its relative residuals",
    )
