"""ZB-V in the pipeline simulator against an independent implementation of its op order (PyTorch's
ScheduleZBVZeroBubble), a naive fixed-point timing reference written with the V placement by name, and the
authors' published properties (zero bubble per stage with T_F = T_B = T_W, 1F1B's memory, twice its p2p).

Every time here is a multiple of 1/2, so the results are exact in float64."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from distlab.model_parallel.pipeline import B, F, W, schedule_order, simulate, zb_v_bubble_fraction
from distlab.model_parallel.pipeline_schedules import p2p_sends

SIZES = [(2, 3), (3, 5), (3, 97), (4, 7), (4, 8), (5, 13), (8, 16)]  # m >= 2p-1; awkward ones included


def torch_zbv_order(p: int, m: int):
    """PyTorch's own ZB-V order, per rank: (kind, micro-batch, virtual stage), idle slots dropped."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    fake = SimpleNamespace(pp_group_size=p, num_stages=2 * p, _n_microbatches=m)
    kinds = {"FORWARD": F, "BACKWARD_INPUT": B, "BACKWARD_WEIGHT": W}
    out = []
    for rank in range(p):
        ops = schedules.ScheduleZBVZeroBubble._calculate_single_rank_operations(fake, rank)
        out.append([(kinds[a.computation_type.name], a.microbatch_index, a.stage_index) for a in ops if a is not None])
    return out


@pytest.mark.parametrize("p,m", SIZES + [(4, 3), (3, 1)])
def test_order_matches_pytorch(p, m):
    """Catches a wrong warm-up count, a swapped chunk or a lost W: every rank's op list must equal PyTorch's
    ScheduleZBVZeroBubble, chunk 1 of rank d being stage 2p-1-d (few micro-batches included)."""
    ours = []
    for d, (kinds, mbs, chunks) in enumerate(schedule_order("zb-v", p, m, 2)):
        ours.append([(k, j, d if c == 0 else 2 * p - 1 - d) for k, j, c in zip(kinds, mbs, chunks)])
    assert ours == torch_zbv_order(p, m)


def reference_starts(p, m, forward=1.0, backward=2.0):
    """Naive reference: relax start = max(previous op's end, input's end) until nothing changes, the V written
    out by name: stage s lives on device s (s < p) or 2p-1-s, F(s) needs F(s-1), B(s) needs B(s+1) (the last
    stage's B needs its own F), W(s) needs B(s)."""
    orders = schedule_order("zb-v", p, m, 2)
    dur = {F: forward / 2, B: backward / 4, W: backward / 4}
    ops = [[(k, j, d if c == 0 else 2 * p - 1 - d) for k, j, c in zip(*o)] for d, o in enumerate(orders)]
    where = {op: (d, i) for d in range(p) for i, op in enumerate(ops[d])}
    start = [[0.0] * len(x) for x in ops]
    changed = True
    while changed:
        changed = False
        for d in range(p):
            for i, (k, j, s) in enumerate(ops[d]):
                t = start[d][i - 1] + dur[ops[d][i - 1][0]] if i else 0.0
                dep = {F: (F, j, s - 1), B: (B, j, s + 1) if s < 2 * p - 1 else (F, j, s), W: (B, j, s)}[k]
                if dep in where:
                    dd, di = where[dep]
                    t = max(t, start[dd][di] + dur[dep[0]])
                if t != start[d][i]:
                    start[d][i], changed = t, True
    return start


@pytest.mark.parametrize("p,m", SIZES[:5] + [(4, 3)])
def test_starts_match_naive_reference(p, m):
    """Catches a dependency mapped to the wrong virtual stage (the V's turn on the last device, the loss on
    device 0): every op's start equals the fixed-point reference's."""
    assert simulate(p, m, "zb-v", virtual=2).starts == reference_starts(p, m)


@pytest.mark.parametrize("p,m", SIZES)
def test_published_properties(p, m):
    """Catches a schedule that idles inside a device's span, holds more than 1F1B's first stage, or sends the
    activations the wrong number of times: with T_F = T_B = T_W each device is busy from its first op to its
    last (m(F+B+W) x 2 chunks), holds p micro-batches, and sends 2(p-1) per micro-batch against 1F1B's p-1."""
    sim = simulate(p, m, "zb-v", virtual=2)
    for t in sim.timeline:
        assert max(t["end"]) - min(t["start"]) == 3.0 * m
    assert sim.peak_inflight == [p] * p
    assert sim.step_time == 3.0 * m + (p - 1) * 0.5
    assert sim.bubble_fraction == pytest.approx(zb_v_bubble_fraction(p, m), rel=1e-12)
    assert p2p_sends("zb-v", p, m, 2) == 2 * (p - 1) * m
    assert p2p_sends("1f1b", p, m) == (p - 1) * m


def test_zbv_needs_two_chunks():
    """Catches a silent fallback to one chunk per device."""
    with pytest.raises(ValueError, match="two chunks"):
        simulate(4, 8, "zb-v")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "distlab", "pipeline", *args], capture_output=True, text=True)


def test_cli_zbv():
    """Catches the CLI dropping the schedule, a wrong --virtual default, a traceback on a bad --virtual or a
    closed form printed where it does not hold (m < 2p-1)."""
    out = json.loads(_cli("--stages", "4", "--microbatches", "8", "--schedule", "zb-v", "--json").stdout)
    assert out["virtual"] == 2 and out["bubble_fraction"] == pytest.approx(out["bubble_fraction_formula"])
    small = json.loads(_cli("--stages", "4", "--microbatches", "3", "--schedule", "zb-v", "--json").stdout)
    assert small["bubble_fraction_formula"] is None
    bad = _cli("--stages", "4", "--microbatches", "8", "--schedule", "zb-v", "--virtual", "3")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
