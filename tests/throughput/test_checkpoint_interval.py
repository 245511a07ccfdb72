"""Checkpoint interval: Young and Daly against an independent numeric optimum, the Monte Carlo against
the exact expectation, the saved bytes against 12 B/param, and the CLI's contract."""

import json
import math

import numpy as np
import pytest

from distlab.core.cli import main
from distlab.models.gpt import GPTConfig, param_count
from distlab.throughput import checkpoint_interval as ck


def exact_wall(tau, c, m, r, work):
    """Daly's complete model written out independently: W/tau segments, each M e^(R/M) (e^((tau+C)/M) - 1)."""
    return work / tau * m * np.exp(r / m) * (np.exp((tau + c) / m) - 1)


@pytest.mark.parametrize("c_over_m", [1e-4, 1e-3, 1e-2, 0.05])
def test_daly_is_the_numeric_optimum_and_young_its_first_order(c_over_m):
    """A dense grid over tau of the exact expected wall time. Would catch a Daly formula with a wrong
    sign on the -C term (off by C, visible at C/M = 0.05) or Young's factor 2 dropped."""
    m = 10_000.0
    c = c_over_m * m
    taus = np.exp(np.linspace(np.log(c / 10), np.log(10 * m), 400_001))
    best = taus[np.argmin(exact_wall(taus, c, m, 0.0, 1.0))]
    assert ck.daly_seconds(c, m) == pytest.approx(best, rel=0.01)
    assert ck.optimal_seconds(c, m) == pytest.approx(best, rel=1e-3)
    assert ck.young_seconds(c, m) == pytest.approx(math.sqrt(2 * c * m), rel=1e-15)
    if c_over_m <= 1e-3:  # Young is first order: fine when C << M
        assert ck.young_seconds(c, m) == pytest.approx(best, rel=0.03)


def test_daly_saturates_at_m_when_the_save_is_longer_than_2m():
    assert ck.daly_seconds(300.0, 100.0) == 100.0


def test_expected_wall_time_without_failures_is_work_plus_saves():
    """M -> infinity: 10 segments of 100 s and one of 50 s, each with a 5 s save. Would catch a last
    partial segment dropped (or counted as full)."""
    t = ck.expected_wall_seconds(1050.0, 100.0, 5.0, 1e12, 7.0)
    assert t == pytest.approx(1050 + 11 * 5, rel=1e-6)


@pytest.mark.parametrize("vectorised", [False, True])
def test_monte_carlo_matches_the_exact_expectation(vectorised):
    """Failures during work, saves and restarts, exponential gaps. The sample mean must lie within 4
    standard errors of the closed form. Would catch a simulation that forgets failures during restarts
    (too fast by the factor e^(R/M)) or keeps the work of a failed segment."""
    m, c, r, tau, work = 1000.0, 30.0, 200.0, 250.0, 5000.0
    rng = np.random.default_rng(7)
    if vectorised:
        walls = ck.simulate_jobs(work, tau, c, m, r, 4000, rng)
    else:
        walls = np.array([ck.simulate_job_naive(work, tau, c, m, r, rng) for _ in range(2000)])
    expected = exact_wall(tau, c, m, r, work)  # work is a whole number of intervals
    assert abs(walls.mean() - expected) <= 4 * walls.std(ddof=1) / math.sqrt(len(walls))
    # and the restart factor is material here: ignoring it would be ~5 standard errors away
    assert abs(exact_wall(tau, c, m, 0.0, work) - expected) > 5 * walls.std(ddof=1) / math.sqrt(len(walls))


def test_saved_state_is_twelve_bytes_per_parameter():
    """fp32 AdamW state dict (weights, exp_avg, exp_avg_sq): 12 B/param plus a little framing, for an
    awkward model. Would catch gradients saved too (16 B/param) or the optimizer state missing (4)."""
    cfg = GPTConfig(vocab=97, seq=17, layers=3, hidden=24, heads=3, ffn=50, tie_embeddings=False)
    out = ck.measure_save("cpu", cfg, repeats=1)
    n = param_count(cfg)
    assert out["params"] == n
    tensors = out["param_tensors"]
    assert tensors == 3 * 12 + 5  # untied: per block 12, embeddings 2, final norm 2, head 1
    # + a 4-byte step counter per tensor; torch.save's zip records cost at most ~400 B per stored tensor
    lower = 12 * n + 4 * tensors
    assert lower <= out["bytes"] <= lower + 400 * 4 * tensors


def test_cli_json_contract(capsys):
    """C = 60 s, M = 3 h: Young = sqrt(2 * 60 * 10800) = 1138.4 s. Keys are the stable contract."""
    assert (
        main(["checkpoint-interval", "--save-seconds", "60", "--mtbf-hours", "3", "--restart-seconds", "120", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["young_seconds"] == pytest.approx(math.sqrt(2 * 60 * 10800))
    x = 60 / (2 * 10800)
    assert out["daly_seconds"] == pytest.approx(math.sqrt(2 * 60 * 10800) * (1 + math.sqrt(x) / 3 + x / 9) - 60)
    tau = out["daly_seconds"]
    assert out["lost_fraction"] == pytest.approx(
        1 - tau / (10800 * math.exp(120 / 10800) * (math.exp((tau + 60) / 10800) - 1))
    )
    assert {
        "young_seconds",
        "daly_seconds",
        "lost_fraction",
        "optimal_seconds",
        "mtbf_seconds",
        "save_seconds",
        "restart_seconds",
    } <= set(out)


@pytest.mark.parametrize(
    "argv",
    [
        ["--save-seconds", "0", "--mtbf-hours", "3"],
        ["--save-seconds", "60"],
        ["--save-seconds", "60", "--mtbf-hours", "3", "--restart-seconds", "-1"],
        ["--save-seconds", "abc", "--mtbf-hours", "3"],
        ["--save-seconds", "inf", "--mtbf-hours", "3"],
        ["--save-seconds", "60", "--mtbf-hours", "nan"],
        ["--save-seconds", "60", "--mtbf-hours", "-3"],
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv, capsys):
    assert main(["checkpoint-interval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_save_many_mtbfs_long_loses_everything_without_overflow(capsys):
    """C = 1e9 s against M = 3.6 s: e^((tau + C)/M) overflows a float, which crashed the calculator with a
    traceback. Every segment then almost surely fails: the loss is 100 % (to rounding)."""
    assert main(["checkpoint-interval", "--save-seconds", "1e9", "--mtbf-hours", "0.001", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lost_fraction"] == pytest.approx(1.0, abs=1e-12)
    # and where the exponent is still finite, the log form equals the direct one (x = 25 and 40)
    for tau in (25 * 100 - 10.0, 40 * 100 - 10.0):
        direct = 1 - tau / (100 * math.exp(3 / 100) * (math.exp((tau + 10) / 100) - 1))
        assert ck.lost_fraction(tau, 10.0, 100.0, 3.0) == pytest.approx(direct, rel=1e-12)
