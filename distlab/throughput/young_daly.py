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

import math

from distlab.core.cli import command, emit, non_negative, parser, positive
from distlab.core.facts import fact

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


def expected_wall_seconds(
    work_s: float, interval_s: float, save_s: float, mtbf_s: float, restart_s: float = 0.0
) -> float:
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


def minimise_log(f, lo: float, hi: float) -> float:
    """The minimiser of a unimodal f(tau) on [lo, hi], by golden-section search in log tau."""
    a0, b0 = math.log(lo), math.log(hi)
    u = _golden(lambda x: f(math.exp(x)), a0, b0)
    return math.exp(u)


def first_order_optimal_seconds(save_s: float, mtbf_s: float) -> float:
    """The minimiser of Young's first-order overhead, found numerically (no square root): the independent check of
    young_seconds."""
    return minimise_log(lambda tau: first_order_lost_fraction(tau, save_s, mtbf_s), save_s * 1e-3, 10 * mtbf_s)


def optimal_seconds(save_s: float, mtbf_s: float) -> float:
    """The exact minimiser of lost_fraction (golden-section search in log tau; R does not move it)."""
    lo, hi = math.log(save_s * 1e-3 + 1e-12), math.log(10 * mtbf_s)
    f = lambda u: lost_fraction(math.exp(u), save_s, mtbf_s)
    return math.exp(_golden(f, lo, hi))


def _golden(f, lo: float, hi: float) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo + (1 - g) * (hi - lo), lo + g * (hi - lo)
    for _ in range(200):
        if f(a) < f(b):
            hi, b = b, a
            a = lo + (1 - g) * (hi - lo)
        else:
            lo, a = a, b
            b = lo + g * (hi - lo)
    return (lo + hi) / 2


def llama3_interruptions() -> tuple[int, int]:
    """(unexpected, all) job interruptions in Llama 3 405B's 54-day snapshot."""
    row = "interconnect.Llama3-405B-pretraining"
    return fact(f"{row}.unexpected_interruptions").value, fact(f"{row}.interruptions").value


def llama3_mtbf_seconds() -> float:
    """Mean time between unexpected interruptions of Llama 3 405B pre-training (16K H100 GPUs)."""
    days = fact("interconnect.Llama3-405B-pretraining.days").value
    return days * 24 * HOUR / fact("interconnect.Llama3-405B-pretraining.unexpected_interruptions").value


# ---------------------------------------------------------------- CLI


@command("checkpoint-interval", "how often to checkpoint: Young's and Daly's intervals and the time lost")
def checkpoint_interval_command(argv: list[str]) -> int:
    p = parser(
        "checkpoint-interval",
        "Optimal checkpoint interval from the save time and the job's mean time\n"
        "between failures (Young 1974, Daly 2006), with the expected fraction of time lost.",
    )
    p.add_argument("--save-seconds", type=positive(float, 1e9), required=True, help="C: seconds to write a checkpoint")
    p.add_argument(
        "--mtbf-hours", type=positive(float, 1e9), required=True, help="M: the job's mean time between failures"
    )
    p.add_argument(
        "--restart-seconds", type=non_negative(float, 1e9), default=0.0, help="R: seconds to restart (default 0)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    c, m, rr = args.save_seconds, args.mtbf_hours * HOUR, args.restart_seconds
    young, daly = young_seconds(c, m), daly_seconds(c, m)
    out = {
        "save_seconds": c,
        "mtbf_seconds": m,
        "restart_seconds": rr,
        "young_seconds": young,
        "daly_seconds": daly,
        "optimal_seconds": optimal_seconds(c, m),
        "lost_fraction": lost_fraction(daly, c, m, rr),
        "lost_fraction_young": lost_fraction(young, c, m, rr),
        "first_order_lost_fraction": first_order_lost_fraction(young, c, m, rr),
    }
    note = (
        "\nwarning: the save takes longer than the MTBF; checkpointing alone cannot make progress safe"
        if c >= m
        else ""
    )
    text = (
        f"checkpoint every {daly / 60:.1f} min of work (Daly; Young: {young / 60:.1f} min)\n"
        f"expected time lost: {100 * out['lost_fraction']:.2f} % "
        f"(C = {c:g} s, M = {args.mtbf_hours:g} h, R = {rr:g} s){note}"
    )
    emit(out, args.json, text)
    return 0
