"""Advice from a plan (distlab.planner.advice): the whiteboard rounding, the canonical Megatron layout, and the
verdict table's words following the plan (issue 25)."""

from __future__ import annotations

import pytest

from distlab.core.results import Result
from distlab.planner.advice import add_advice, canonical_megatron, whiteboard
from distlab.planner.config import Training, cluster, model
from distlab.planner.search import search


@pytest.mark.parametrize(
    "value,expected",
    [(208_253_829_120, 210e9), (1.0333, 1.0), (0.004687, 0.0047), (97, 97.0), (257, 260.0), (-0.0138, -0.014)],
)
def test_whiteboard_keeps_two_significant_figures(value, expected):
    """Would catch integers passed through unrounded (round_sig leaves ints alone: 208 GB printed for 210 GB)."""
    assert whiteboard(value) == pytest.approx(expected, rel=1e-12)


def test_the_canonical_megatron_layout_is_what_it_says():
    """TP = the node, ZeRO-1 over DP, no offload, interleaved whenever there is a pipeline, for 70B on 64 H100s.
    Would catch the canonical search quietly using ZB-H1, offload or a smaller TP."""
    m, c = model("70B"), cluster("H100-SXM", nodes=8)
    e = canonical_megatron(m, c, Training(global_batch_tokens=4 * 2**20, seq=4096))
    p = e.plan
    assert p.tp == 8 and p.zero == 1 and p.offload == "none" and p.cp == 1
    assert p.pp == 1 or p.schedule == "interleaved"
    assert p.tp * p.pp * p.dp == 64


def test_the_verdict_follows_the_plan():
    """The words come from the plan: a fixed plan that recomputes and offloads is described as one. Would catch a
    verdict typed once and left (the defect issue 25 found on practice 1 and 2)."""
    m, c = model("13B"), cluster("A100-SXM-80GB")
    t = Training(global_batch_tokens=64 * 4096, seq=4096, task="finetune")
    ranked = search(m, c, t, fixed={"tp": 1, "pp": 1, "zero": 3, "recompute": "full", "offload": "optimizer"})
    r = Result("x")
    add_advice(r, "k", m, c, t, ranked, canonical=False)
    words = dict(r.tables["k_advice"].rows)
    assert words["recomputation"] == "needs full recomputation"
    assert words["offload"].startswith("needs CPU optimizer offload")
    assert r.quantities["k_recomputes"].value == 1 and r.quantities["k_offloads"].value == 1
    free = 1 - ranked[0].memory_bytes / ranked[0].usable_bytes
    assert r.quantities["k_headroom"].value == pytest.approx(free, rel=1e-12)
