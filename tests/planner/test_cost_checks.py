"""Chapter 7's compared plans' step causes by hand (distlab.planner.cost_checks): the ring attention's and the
experts' collectives counted against closed forms with a toy collective time, and the regression the hand
reference found (an EP plan's head timed at a training share of 1)."""

from __future__ import annotations

import pytest

from distlab.planner import comms, cost_checks
from distlab.planner.config import Plan
from distlab.planner.cost import stage_time
from distlab.planner.parallel_rules import requests


@pytest.fixture
def bytes_per_ns(monkeypatch):
    """Every collective takes its message's bytes in nanoseconds: the counts and bytes are then readable."""
    monkeypatch.setattr(comms, "seconds", lambda op, b, g: b * 1e-9 if g.ranks > 1 else 0.0)
    monkeypatch.setattr(comms, "alltoall_seconds", lambda b, g: b * 1e-9 if g.ranks > 1 else 0.0)


def test_ring_attention_and_all_to_alls_by_closed_form(bytes_per_ns):
    m, c, t = requests()["moe"]  # Mixtral 8x7B: h 4096, 8 KV heads of 128, top-2, seq 32768, on H100s
    p = Plan(tp=2, pp=4, dp=1, cp=8, ep=2, zero=1, micro_batch=1, microbatches=4)
    tokens = 32768 // 8
    swap = 2 * (2 * tokens * 8 * 128 / 2 * 2) * 1e-9  # two ranks' K and V chunks
    assert cost_checks.stage_blocks(m, p) == 8
    lt = cost_checks._layer_kernels(m, c, t, p)
    tax = 32 / c.gpu.sms
    fwd, bwd = 7 * swap, 14 * swap
    hf, hb = min(fwd, lt.attention_forward * 7 / 8), min(bwd, lt.attention_backward * 7 / 8)
    per_layer = fwd - hf + tax * hf + bwd - hb + tax * hb
    assert cost_checks.cp_exposed_by_hand(m, c, t, p) == pytest.approx(4 * 8 * per_layer, rel=1e-12)
    sent = tokens // 2 * 2 * 4096 * 2  # seq/cp tokens split over TP 2, top-2 copies of h in bf16
    assert cost_checks.ep_exposed_by_hand(m, c, t, p) == pytest.approx(4 * 8 * 4 * sent * 1e-9, rel=1e-12)


def test_an_expert_parallel_plans_head_takes_the_same_time_as_without_ep():
    """The cost model once reused the name `share` (the kernels' training share) for the MoE layers' share, so with
    EP the head's GEMMs were timed at a share of 1: faster than the same head without EP."""
    m, c, t = requests()["moe"]
    head = []
    for ep in (1, 2):
        p = Plan(tp=2, pp=4, dp=2, cp=2, ep=ep, zero=1, micro_batch=1, microbatches=8)
        last = stage_time(m, c, t, p, 8, first=False, last=True)
        middle = stage_time(m, c, t, p, 8, first=False, last=False)
        head.append(last.forward - middle.forward)
    assert head[1] == pytest.approx(head[0], rel=1e-12)


def test_the_largest_stage_is_the_last_for_llama_and_the_first_for_gpt():
    """Llama's last stage adds the final norm and the untied head (V x h + h) to the first's embedding (V x h); GPT's
    first stage holds the embedding and the learned positions (V x h + s x h), its last the final LayerNorm (2h) and
    the tied head's copy (V x h)."""
    plan = Plan(tp=4, pp=4, dp=8, zero=1, micro_batch=1, microbatches=8)
    llama = (80 // 4) * 855_654_400 + 32000 * 8192 + 8192  # 2h^2 + 2h kv + 3hf + 2h per block (config.json)
    assert cost_checks._largest_stage_params("70B", 4096, plan) == (-(-llama // 4), 0)
    h, v, s = 12288, 50257, 2048
    gpt = (96 // 4) * (12 * h * h + 13 * h) + v * h + s * h
    assert cost_checks._largest_stage_params("175B", s, plan) == (-(-gpt // 4), 0)


def test_a_pipelined_plans_twins_cover_every_zero_stage_offload_and_no_pipeline():
    plan = Plan(tp=2, pp=4, dp=2, zero=1, micro_batch=1, microbatches=8, schedule="interleaved", virtual=2)
    twins = cost_checks.twins(plan)
    assert plan not in twins and len(twins) == len(set(twins))
    flat = [q for q in twins if q.pp == 1]
    assert {(q.zero, q.offload) for q in flat} == {(0, "none")} | {
        (z, o) for z in (1, 2, 3) for o in ("none", "optimizer")
    }
    assert all(q.dp == 8 and q.schedule == "1f1b" for q in flat)
    assert {(q.zero, q.offload) for q in twins if q.pp == 4} == {(0, "none"), (1, "optimizer")} | {
        (z, o) for z in (2, 3) for o in ("none", "optimizer")
    }


@pytest.mark.parametrize("schedule,virtual", [("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_the_searchs_closed_form_pipeline_agrees_with_the_bubble_fraction(schedule, virtual):
    """The ranking's closed form idles (p - 1)/(v m + p - 1) of the step's pipeline time without the sends (1F1B and
    interleaved), ZB-H1 (p - 1) forwards; the hand pair of cost_checks agrees with it."""
    from types import SimpleNamespace

    from distlab.planner.cost import step

    m, c, t = requests()["cp_cut"]  # a dense model on H100s
    p = Plan(tp=4, pp=4, dp=2, zero=1, micro_batch=1, microbatches=8, schedule=schedule, virtual=virtual)
    closed = step(m, c, t, p, exact_pipeline=False)
    f, b = max(zip(closed.stage_forward_seconds, closed.stage_backward_seconds), key=sum)
    busy, idle = 8 * (f + b), closed.breakdown.bubble - 2 * 3 * closed.p2p_seconds
    if schedule == "zb-h1":
        assert idle == pytest.approx(3 * f, rel=1e-12)
    else:
        assert idle / (busy + idle) == pytest.approx(3 / (virtual * 8 + 3), rel=1e-12)
    pair = cost_checks._search_bubble_pair(m, c, t, SimpleNamespace(plan=p, time=closed), closed.p2p_seconds)
    assert pair[0] == pytest.approx(pair[1], rel=1e-12)


def test_a_flat_plans_twins_include_a_two_stage_pipeline():
    """Where every shown plan is flat, a mistake in the search's closed-form pipeline only removes pipelined
    candidates from the ranking; the two-stage twin (half the replicas, twice the micro-batches) keeps it checked."""
    plan = Plan(tp=8, dp=8, zero=1, micro_batch=1, microbatches=4)
    assert Plan(tp=8, pp=2, dp=4, zero=1, micro_batch=1, microbatches=8) in cost_checks.twins(plan, layers=80)
    assert all(q.pp == 1 for q in cost_checks.twins(plan, layers=81))  # odd layers: no even split, no twin
