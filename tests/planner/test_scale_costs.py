"""Costs that grow with N: the planner's expected maximum of N normals against chapter 10's numpy integral and the
closed forms at N = 2 and 3, stragglers proportional to the rest of the step, off by default, and `--rank-jitter`
and `--oversubscription` reaching the JSON."""

import json
import math

import pytest

from distlab.core.cli import main
from distlab.models.shapes import preset
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.cost import step
from distlab.planner.scale_costs import RANK_JITTER, expected_max_standard_normal, straggler_seconds
from distlab.planner.scale_validation import slope
from distlab.throughput import stragglers


@pytest.mark.parametrize("n", [2, 3, 97, 257, 2048])
def test_expected_max_matches_chapter_10_and_the_closed_forms(n):
    """E[Z_(2)] = 1/sqrt(pi), E[Z_(3)] = 3/(2 sqrt(pi)) (closed forms); the rest against chapter 10's numpy
    integral. Would catch a wrong exponent on Phi or a grid too coarse for the tail."""
    closed = {2: 1 / math.sqrt(math.pi), 3: 1.5 / math.sqrt(math.pi)}
    got = expected_max_standard_normal(n)
    assert got == pytest.approx(closed.get(n, stragglers.expected_max_standard_normal(n)), rel=1e-9)
    assert expected_max_standard_normal(1) == 0.0


def test_stragglers_scale_the_rest_of_the_step():
    """With jitter j the step is the rest x (1 + j E[Z_(N)]), N = the plan's 24 GPUs (3 nodes: an awkward count);
    j = 0 (the default) adds nothing. Would catch the term taken on the wrong N or left out of the total."""
    m = preset("7B")
    t = Training(global_batch_tokens=48 * 4096, seq=4096)
    p = Plan(dp=24, zero=1, microbatches=2)
    off = step(m, cluster("H100-SXM", nodes=3), t, p)
    on = step(m, cluster("H100-SXM", nodes=3, rank_jitter=RANK_JITTER), t, p)
    assert off.breakdown.stragglers == 0.0
    assert on.seconds == pytest.approx(off.seconds * (1 + RANK_JITTER * expected_max_standard_normal(24)), rel=1e-12)
    assert on.breakdown.stragglers == pytest.approx(straggler_seconds(off.seconds, 24), rel=1e-12)


def test_slope_is_the_loss_per_doubling():
    """A series losing exactly 3 % per doubling has slope ln(0.97). Would catch a slope taken against ln N."""
    pts = [(128 * 2**i, 1000 * 0.97**i) for i in range(5)]
    assert slope(pts) == pytest.approx(math.log(0.97), rel=1e-12)


def test_cli_shows_the_cluster_and_the_stragglers(capsys):
    """Would catch the flags parsed but never reaching the cluster the plan is priced on."""
    argv = ["plan", "--model", "7B", "--nodes", "2", "--rank-jitter", "0.02", "--oversubscription", "2", "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)[0]
    assert plan["cluster"]["oversubscription"] == 2 and plan["cluster"]["rank_jitter"] == 0.02
    assert plan["step_breakdown"]["stragglers"] > 0
    assert sum(plan["step_breakdown"].values()) == pytest.approx(plan["step_seconds"], rel=1e-9)
