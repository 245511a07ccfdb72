"""Chapter 7's second derivations (distlab.planner.rules_checks): counted as times, they agree with the chapter's
closed forms, and a shown share or slowdown that is off fails its claim."""

from __future__ import annotations

import math

import pytest

from distlab.core.results import Result
from distlab.planner import rules_checks as rc


@pytest.mark.parametrize("tp, hidden, flops, bus", [(8, 8192, 744.8e12, 456e9), (16, 8192, 744.8e12, 50e9)])
def test_tp_time_counted_equals_the_closed_form(tp, hidden, flops, bus):
    assert rc.tp_overhead_by_times(tp, hidden, flops, bus) == pytest.approx(2 * (tp - 1) * flops / (9 * hidden * bus))


def test_zero3_hiding_point_is_flops_over_link_rate():
    assert rc.zero3_hiding_tokens_by_times(744.8e12, 50e9) == pytest.approx(14896)


def test_source_numbers():
    assert rc.sustained_flops_by_source() == 744.8e12
    assert rc.port_bytes_per_s("InfiniBand-NDR") == 50e9  # 400 Gb/s
    assert rc.port_bytes_per_s("Ethernet-100G") == 12.5e9


def _result(slowdown: float) -> Result:
    r = Result("parallel-rules", kind="computed")
    r.data["compared"] = {
        "moe_best": {"compute": 9.0, "exposed_cp_ep": 1.0},
        "moe_inside": {"compute": 9.5, "exposed_cp_ep": 1.5},
    }
    r.add("moe_inside_slowdown", slowdown, "fraction")
    r.add("moe_a2a_share", 0.1, "fraction")
    return r


def test_a_wrong_slowdown_fails_and_the_right_one_passes():
    good = _result(0.1)
    rc.check_search_figures(good)
    assert not good.failed_claims and len(good.claims) == 2
    bad = _result(11 / 10)  # (11 / 10) instead of 11 / 10 - 1
    rc.check_search_figures(bad)
    assert [c.name for c in bad.failed_claims] == [c.name for c in bad.claims if "slowdown" in c.name]
    assert math.isclose(bad.failed_claims[0].expected, 0.1)


def test_a_plans_table_memory_cell_off_by_a_layer_fails():
    """One row of chapter 7's plans table, its memory as the hand reference sizes it, then with one layer's
    weights too many: only the second fails."""
    from distlab.models.shapes import preset
    from distlab.planner.planner_checks import read_label
    from distlab.planner.worked_plan_checks import layer_params, plan_memory

    label = "TP 1 x PP 1 x DP 8, ZeRO-1, micro-batch 1 x 128"
    right = plan_memory(read_label(label), preset("7B").seq, "7B")["device"]
    assert not _plans_row_fails("7B", label, right)
    assert _plans_row_fails("7B", label, right + 2 * layer_params("7B"))


def _plans_row_fails(model: str, label: str, memory: float) -> bool:
    """Whether chapter 7's plans-table memory claim fails on one row."""
    from distlab.core.results import Quantity

    r = Result("parallel-rules", kind="computed")
    r.table(
        "plans",
        ["model", "cluster", "plan", "memory", "step", "why"],
        [[model, "8 nodes", label, Quantity(memory, "B"), Quantity(1.0, "s"), ""]],
    )
    rc.check_plan_memory(r)
    return bool(r.failed_claims)


def test_a_mixtral_row_with_its_experts_sharded_over_every_rank_fails():
    """Chapter 7's MoE row: the hand reference shards a GPU's experts over the dp x cp / ep ranks that hold them.
    Its memory as the planner priced it before (experts' state over all dp x cp ranks, as if EP did not shrink their
    group) is 6.3 GB lower at EP 4 and fails; the hand figure passes."""
    from distlab.planner.planner_checks import read_label
    from distlab.planner.worked_plan_checks import CONFIGS, plan_memory

    label = "TP 1 x PP 1 x DP 16 x CP 4 x EP 4, ZeRO-1, micro-batch 1 x 8, full recompute"
    plan = read_label(label)
    assert plan is not None and (plan.cp, plan.ep) == (4, 4)
    right = plan_memory(plan, CONFIGS["Mixtral-8x7B"]["seq"], "Mixtral-8x7B")["device"]
    # the 32 layers' 2 experts a GPU holds at EP 4: 12 B of master and moments each, over 64 ranks instead of 16
    experts = 32 * 2 * 3 * 4096 * 14336
    wrong = right - 12 * (experts / 16 - experts / 64)
    assert right - wrong == pytest.approx(6.34e9, rel=0.01)
    row = "Mixtral 8x7B, 8 experts, top-2"
    assert not _plans_row_fails(row, label, right)
    assert _plans_row_fails(row, label, wrong)


def test_the_hand_sizer_reports_the_hand_bytes_and_the_fit_margin():
    """search's `sizer` for chapter 7's re-search: a plan's device bytes are plan_memory's, and what the fit test
    adds (fragmentation, CUDA context) makes the budget by hand the usable bytes. Would catch the NCCL buffers
    dropped from the hand figure, or the context counted twice."""
    from distlab.models.shapes import preset
    from distlab.planner.config import Plan, Training, cluster
    from distlab.planner.worked_plan_checks import budget, plan_memory

    plan = Plan(tp=2, pp=8, dp=4, zero=1, microbatches=256, offload="optimizer")
    m = preset("70B")
    t = Training(global_batch_tokens=4 * 2**20, seq=4096)
    mem = rc.hand_sizer()(m, cluster("H100-SXM", nodes=8), t, plan)
    hand = plan_memory(plan, 4096, "70B")
    assert mem.device_bytes == pytest.approx(hand["device"], rel=1e-12)
    capacity = mem.reserved_bytes + mem.outside_allocator_bytes - mem.device_bytes + budget("H100-SXM")
    assert capacity == pytest.approx(81559 * 2**20, rel=1e-12)  # nvidia-smi's total for an H100 80GB HBM3, MiB
