"""The planner applied: chapter 14's worked 7B plan (distlab.planner.worked_plan_7b) and the practice questions
(distlab.practice), against hand arithmetic and chapter 10's models."""

import pytest

from distlab.planner.search import search
from distlab.planner.worked_plan_7b import STRATEGIES, finetune, leanest


def test_worked_plan_strategies_7b():
    """Chapter 14's table: DDP cannot fit even at its leanest (16 bytes x 6,738,415,616 parameters exceed an
    A100's usable memory: 81,920 MiB reported, less 5 % fragmentation and the 723 MiB CUDA context), while each ZeRO
    stage's best plan fits; the chosen plan has no model parallelism."""
    m, c, t = finetune("7B")
    usable = 0.95 * 81920 * 2**20 - 723 * 2**20
    plan, mem = leanest(m, c, t, STRATEGIES["DDP"])
    assert mem.weights + mem.gradients + mem.optimizer == 16 * 6_738_415_616 > usable
    for name in ("ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP"):
        best = search(m, c, t, where=STRATEGIES[name])[0]
        assert best.memory_bytes <= usable and best.plan.zero == int(name[5])
    best = search(m, c, t)[0].plan
    assert (best.tp, best.pp, best.dp) == (1, 1, 8)


def test_mfu_budget_triage_by_hand():
    """Practice 5's triage against hand arithmetic: the MFU recomputed with attention is 28 % x (1 + 12Lhs / 6N) for
    Llama 2 13B (40 layers, h = 5120, s = 4096, 13,015,864,320 parameters); the input line is chapter 10's
    max(C, L/w) with the plan's step scaled by its band; the residual is the MFU over band x known factors. Would
    catch a fudge factor creeping back in (the residual would be exactly 1), a wrong attention term, or the loader
    model applied to the planner's raw step."""
    from distlab.planner.calibration import mfu_band
    from distlab.planner.config import Plan, Training, cluster, model
    from distlab.planner.cost import step
    from distlab.practice.diagnose_28_mfu import LOADER_SECONDS, MFU_OBSERVED, TEAM_PLAN, practice_mfu_budget

    r = practice_mfu_budget("cpu")
    q = {k: v.value for k, v in r.quantities.items()}
    n, layers, h, s = 13_015_864_320, 40, 5120, 4096
    assert q["mfu_full"] == pytest.approx(MFU_OBSERVED * (6 * n + 12 * layers * h * s) / (6 * n), rel=1e-9)
    team = step(
        model("13B"),
        cluster("H100-SXM", nodes=4),
        Training(global_batch_tokens=256 * 4096, seq=4096, tp_overlap=True),
        Plan(**TEAM_PLAN),
    )
    low, high = mfu_band(team.mfu)
    fast = team.seconds * team.mfu / high
    assert q["factor_input_fast"] == pytest.approx(min(1.0, fast / LOADER_SECONDS), rel=1e-9)
    expected_high = high * q["factor_input_fast"] * q["factor_stragglers"] * q["factor_checkpoints"]
    assert q["residual"] == pytest.approx(q["mfu_full"] / expected_high, rel=1e-9)
    assert q["residual"] < 0.999  # no factor fitted to make the budget land on the observed MFU
    assert all(c.passed for c in r.claims)


def test_practice_checkpoint_dollars_by_hand():
    """Practice 6's cost is its GPU-hours x the median of the H100 on-demand rows of gpu_prices.toml (typed here:
    Lambda 3.78, Modal 3.9492, Replicate 5.49, RunPod 4.76, AWS 98.32 / 8): 4.76. Would catch spot rows or a market
    range entering the median, or an instance price not divided by its GPUs."""
    from distlab.practice.checkpoint_interval import practice_checkpoint

    r = practice_checkpoint("cpu")
    q = {k: v for k, v in r.quantities.items()}
    assert q["price"].value == pytest.approx(4.76)
    assert q["usd"].value * {"million USD": 1e6, "thousand USD": 1e3}[q["usd"].unit] == pytest.approx(
        q["gpu_hours"].value * 4.76, rel=1e-3
    )
    assert all(c.passed for c in r.claims)
