"""The planner applied: chapter 14's worked 7B plan (distlab.planner.worked_plan_7b) and the practice questions
(distlab.practice), against hand arithmetic and chapter 10's models."""

import pytest

from distlab.planner.search import search
from distlab.planner.worked_plan_7b import STRATEGIES, finetune, leanest


def test_worked_plan_strategies_7b():
    """Chapter 14's table: DDP cannot fit even at its leanest (16 bytes x 6,738,415,616 parameters exceed
    the 72 GB usable), while each ZeRO stage's best plan fits; the chosen plan has no model parallelism."""
    m, c, t = finetune("7B")
    plan, mem = leanest(m, c, t, STRATEGIES["DDP"])
    assert mem["weights"] + mem["gradients"] + mem["optimizer"] == 16 * 6_738_415_616 > 72e9
    for name in ("ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP"):
        best = search(m, c, t, where=STRATEGIES[name])[0]
        assert best.memory_bytes <= 72e9 and best.plan.zero == int(name[5])
    best = search(m, c, t)[0].plan
    assert (best.tp, best.pp, best.dp) == (1, 1, 8)


def test_mfu_budget_input_line_by_hand():
    """Practice 5's input-pipeline line is chapter 10's model: a step takes max(C, L/w) with w workers, so
    with one worker and L > C the MFU is multiplied by C / L; and the lines multiply to the final MFU."""
    from distlab.planner.config import Plan, Training, cluster, model
    from distlab.planner.cost import step
    from distlab.planner.planner_validation import h100_optimism
    from distlab.practice.diagnose_28_mfu import LOADER_SECONDS, LOADER_WORKERS, TEAM_PLAN, practice_mfu_budget

    m = model("13B")
    compute = (
        step(m, cluster("H100-SXM", nodes=4), Training(global_batch_tokens=256 * 4096, seq=4096), Plan(**TEAM_PLAN))[
            "step_seconds"
        ]
        * h100_optimism()
    )
    r = practice_mfu_budget("cpu")
    q = {k: v.value for k, v in r.quantities.items()}
    assert LOADER_WORKERS == 1 and LOADER_SECONDS > compute
    assert q["factor_input"] == pytest.approx(compute / LOADER_SECONDS, rel=1e-9)
    product = q["ideal_mfu"]
    for key in ("bubble", "tp", "recompute", "dp", "kernels", "input", "stragglers", "checkpoints"):
        product *= q[f"factor_{key}"]
    assert product == pytest.approx(q["final_mfu"], rel=1e-12)
    assert all(c.passed for c in r.claims)
