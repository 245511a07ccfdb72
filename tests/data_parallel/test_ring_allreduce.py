"""The all-reduce simulator against independent references: numpy sums, per-rank byte counts from
np.array_split lengths, closed forms for tree and naive, the single-port rule, and the CLI."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from distlab.core.cli import main
from distlab.data_parallel.ring_allreduce import ring_seconds, schedule, simulate, traffic

SIZES = [(1, 5), (2, 1), (3, 2), (3, 97), (4, 1000), (5, 257), (7, 7), (8, 3), (13, 1000)]  # (ranks, elements)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive"])
@pytest.mark.parametrize(("n", "elements"), SIZES)
def test_every_rank_ends_with_the_direct_sum(algorithm, n, elements):
    """Integer data, so the sum is exact in any order: catches a chunk reduced twice or never, an
    all-gather that forwards the wrong chunk, or a step that reads a buffer another message of the same
    step already changed."""
    rng = np.random.default_rng(n * 1000 + elements)
    bufs = [rng.integers(-50, 50, elements) for _ in range(n)]
    before = [b.copy() for b in bufs]
    expected = np.sum(np.stack(bufs), axis=0)
    for out in simulate(bufs, algorithm):
        np.testing.assert_array_equal(out, expected)
    for b, c in zip(bufs, before):  # the caller's buffers are not reduced in place
        np.testing.assert_array_equal(b, c)


@pytest.mark.parametrize(("n", "elements"), SIZES)
def test_ring_bytes_per_rank_from_array_split(n, elements):
    """Rank r sends every chunk but (r+1) and (r+2) mod N once per phase; chunk lengths from numpy's
    array_split. Catches an off-by-one in the chunk schedule or in the chunk boundaries."""
    c = [len(x) for x in np.array_split(np.arange(elements), n)]
    e = 4
    t = traffic(elements * e, n, "ring", element_bytes=e)
    if n == 1:
        assert t.sent == [0] and t.received == [0] and t.steps == 0
        return
    sent = [e * (2 * elements - c[(r + 1) % n] - c[(r + 2) % n]) for r in range(n)]
    assert t.sent == sent
    assert t.received == [sent[(r - 1) % n] for r in range(n)]  # what rank r-1 sends, rank r receives
    assert sum(t.sent) == 2 * (n - 1) * elements * e
    assert t.steps == 2 * (n - 1)
    assert t.step_bytes == [e * max(c)] * (2 * (n - 1))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 33])
def test_tree_and_naive_bytes_per_rank(n):
    """Binomial tree: rank r has one parent (r > 0) and one child per k with 2^k below r's lowest set bit
    and r + 2^k < N; each link carries the whole buffer once up and once down."""
    b = 1000
    logn = math.ceil(math.log2(n)) if n > 1 else 0

    def children(r):
        low = (r & -r) if r else 1 << logn
        return sum(1 for k in range(logn) if (1 << k) < low and r + (1 << k) < n)

    t = traffic(b, n, "tree")
    expected = [b * (children(r) + (r > 0)) for r in range(n)]
    assert t.sent == expected and t.received == expected
    assert t.steps == 2 * logn and max(t.sent) == logn * b
    naive = traffic(b, n, "naive")
    assert naive.sent == [(n - 1) * b] + [b] * (n - 1) and naive.received == naive.sent
    assert naive.steps == 2 * (n - 1)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive"])
def test_single_port_rule(algorithm):
    """The cost model assumes each rank sends at most one and receives at most one message per step; a
    schedule that broke it would be charged too little time."""
    for n in range(1, 20):
        for step in schedule(algorithm, 100, n):
            assert len(set(step.src.tolist())) == len(step.src)
            assert len(set(step.dst.tolist())) == len(step.dst)
            assert not set(zip(step.src.tolist(), step.dst.tolist())) & {(r, r) for r in range(n)}


def test_alpha_beta_time():
    """Divisible buffer: the closed form 2(N-1)(alpha + B/(N beta)). Uneven: the longest chunk sets each
    step's time. Tree: 2 ceil(log2 N) (alpha + B/beta)."""
    a, beta = 3e-6, 25e9
    assert traffic(12_000, 6, "ring").seconds(a, beta) == pytest.approx(ring_seconds(12_000, 6, a, beta), rel=1e-12)
    assert traffic(1001, 4, "ring").seconds(a, beta) == pytest.approx(6 * (a + 251 / beta), rel=1e-12)
    assert traffic(1000, 5, "tree").seconds(a, beta) == pytest.approx(6 * (a + 1000 / beta), rel=1e-12)


def test_float32_rounding_stays_within_the_summation_bound():
    """The ring adds in a different order than np.sum: not bit-equal, but within (N-1) u sum|x| of the
    float64 sum (Higham, recursive summation)."""
    rng = np.random.default_rng(3)
    n = 6
    xs = [rng.standard_normal(1001).astype(np.float32) for _ in range(n)]
    exact = np.sum(np.asarray(xs, np.float64), axis=0)
    bound = (n - 1) * 2.0**-24 * np.sum(np.abs(np.asarray(xs, np.float64)), axis=0)
    for out in simulate(xs, "ring"):
        assert np.all(np.abs(out.astype(np.float64) - exact) <= bound)


def _cli(capsys, *args):
    code = main(["allreduce", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json(capsys):
    code, out, _ = _cli(capsys, "--ranks", "4", "--bytes", "1001", "--latency", "1e-6", "--bandwidth", "1e9", "--json")
    assert code == 0
    d = json.loads(out)
    c = [251, 250, 250, 250]  # 1001 bytes into 4 chunks, the first one longer
    sent = [2 * 1001 - c[(r + 1) % 4] - c[(r + 2) % 4] for r in range(4)]
    assert d["bytes_sent_per_rank"] == sent and d["bytes_received_per_rank"] == [sent[(r - 1) % 4] for r in range(4)]
    assert d["steps"] == 6 and d["algorithm"] == "ring"
    assert d["time_s"] == pytest.approx(6 * (1e-6 + 251 / 1e9), rel=1e-12)
    code, out, _ = _cli(capsys, "--ranks", "8", "--bytes", "8e6", "--algorithm", "tree", "--json")
    d = json.loads(out)
    assert d["steps"] == 6 and max(d["bytes_sent_per_rank"]) == 3 * 8_000_000 and d["time_s"] is None


def test_cli_text(capsys):
    code, out, _ = _cli(capsys, "--ranks", "8", "--bytes", "1e9", "--latency", "5e-6", "--bandwidth", "1e11")
    assert code == 0 and "14 steps" in out and "1.75 GB" in out and "alpha-beta time" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ranks", "4", "--bytes", "100", "--latency", "1e-6"], "go together"),
        (["--ranks", "0", "--bytes", "100"], "must be positive"),
        (["--ranks", "2.5", "--bytes", "100"], "whole number"),
        (["--ranks", "4", "--bytes", "10", "--element-bytes", "4"], "whole number of 4-byte elements"),
        (["--ranks", "100000", "--bytes", "10"], "at most"),
        (["--ranks", "4", "--bytes", "10", "--algorithm", "butterfly"], "invalid choice"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(capsys, args, message):
    code, _, err = _cli(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err


def test_cli_real_process_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "distlab.core.cli", "allreduce", "--ranks", "3", "--bytes", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
