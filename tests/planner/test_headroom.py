"""The headroom rule, the fastest plan beside the recommended one, and the stacks (issue 25)."""

from __future__ import annotations

import json

import pytest

from distlab.core.cli import main
from distlab.planner.calibration import stored_error_range, within_band
from distlab.planner.config import Training, cluster, model, usable_bytes
from distlab.planner.search import fastest, search

HEADLINE = (  # the three headline requests: 70B on 64 H100s, 7B and 13B full fine-tunes on one 8-GPU node
    ("70B", 8, "pretrain", 4 * 2**20),
    ("7B", 1, "finetune", 64 * 4096),
    ("13B", 1, "finetune", 64 * 4096),
)


def _plan_json(capsys, *argv: str) -> list[dict]:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name,nodes,task,tokens", HEADLINE)
def test_headline_requests_recommend_a_plan_with_eight_per_cent_free(name, nodes, task, tokens):
    """Would catch the ranking going back to time alone (chapter 14's old 80 of 80.8 GB answer) or headroom counted
    against the device instead of the usable budget."""
    m, c = model(name), cluster("H100-SXM", nodes=nodes)
    t = Training(global_batch_tokens=tokens, seq=4096, task=task)
    ranked = search(m, c, t)
    best, budget = ranked[0], usable_bytes(c.gpu)
    assert 1 - best.memory_bytes / budget >= 0.08
    quick = min(ranked, key=lambda e: e.step_seconds)
    assert fastest(ranked).step_seconds == pytest.approx(quick.step_seconds, rel=1e-12)
    # the recommendation is never slower than the fastest by more than the band allows
    e_min, _ = stored_error_range()
    assert best.time.mfu >= quick.time.mfu * (1 + e_min) - 1e-12


def test_zero_headroom_ranks_by_time_alone():
    """--min-headroom 0: the first plan is the fastest. Would catch the rule applied even when switched off."""
    m, c = model("7B"), cluster("H100-SXM")
    t = Training(global_batch_tokens=64 * 4096, seq=4096, task="finetune")
    ranked = search(m, c, t, min_headroom=0)
    assert ranked[0].step_seconds == min(e.step_seconds for e in ranked)


def test_within_band_by_hand():
    """A slower plan is equally good while its MFU >= the best's x (1 + e_min) (e_min = -0.138 stored): 0.50 against
    0.57 is inside (0.57 x 0.862 = 0.491), 0.49 is not. Would catch the band applied the wrong way round."""
    assert stored_error_range()[0] == pytest.approx(-0.1380)
    assert within_band(0.50, 0.57) and not within_band(0.49, 0.57)
    assert within_band(0.57, 0.50)  # a faster plan is always as good


def test_json_has_usable_bytes_headroom_and_the_fastest_plan(capsys):
    """`distlab plan --json` per plan: usable_bytes_per_gpu and headroom_fraction = 1 - memory / usable; the
    recommended plan names the fastest when they differ, with the time and memory differences. Would catch a renamed
    key, a headroom against the datasheet's 80 GB, or differences of the wrong sign."""
    plans = _plan_json(capsys, "--model", "7B", "--task", "finetune", "--top", "3")
    for p in plans:
        assert p["headroom_fraction"] == pytest.approx(1 - p["memory_bytes_per_gpu"] / p["usable_bytes_per_gpu"])
        assert p["usable_bytes_per_gpu"] == pytest.approx(usable_bytes(cluster("H100-SXM").gpu))
    first = plans[0]
    assert first["recommended"] and first["headroom_fraction"] >= 0.08 and first["min_headroom"] == 0.08
    fast = next(p for p in plans if p["fastest"])
    assert fast is not first and fast["headroom_fraction"] < 0.08
    vs = first["fastest_plan"]
    assert vs["label"] == fast["label"]
    assert vs["step_seconds_difference"] == pytest.approx(first["step_seconds"] - fast["step_seconds"])
    assert vs["memory_bytes_difference"] == pytest.approx(first["memory_bytes_per_gpu"] - fast["memory_bytes_per_gpu"])
    assert vs["memory_bytes_difference"] < 0 < vs["step_seconds_difference"]


def test_every_explanation_prints_the_headroom(capsys):
    """Would catch an explanation (here a fixed layout, one plan) that leaves the headroom out."""
    plans = _plan_json(capsys, "--model", "7B", "--task", "finetune", "--dp", "8", "--zero", "3", "--micro-batch", "1")
    assert any(line.startswith("Headroom ") for line in plans[0]["reasons"])


def test_min_headroom_flag_changes_the_rule(capsys):
    """--min-headroom 0.3 asks for 30 % free; the 7B fine-tune's recommendation then leaves at least that (or, if no
    plan in the band does, the most of any). Would catch the flag parsed but not passed on."""
    plans = _plan_json(capsys, "--model", "7B", "--task", "finetune", "--min-headroom", "0.3")
    default = _plan_json(capsys, "--model", "7B", "--task", "finetune")
    assert plans[0]["min_headroom"] == 0.3
    assert plans[0]["headroom_fraction"] >= default[0]["headroom_fraction"]


def test_tp_overlap_is_off_unless_asked(capsys):
    """Would catch overlap back on by default: the 70B plan is slower without it, never faster."""
    off = _plan_json(capsys, "--model", "70B", "--nodes", "8", "--tp", "8", "--pp", "1", "--zero", "1")
    on = _plan_json(capsys, "--model", "70B", "--nodes", "8", "--tp", "8", "--pp", "1", "--zero", "1", "--tp-overlap")
    assert off[0]["step_breakdown"]["exposed_tp"] > on[0]["step_breakdown"]["exposed_tp"] > 0


@pytest.mark.parametrize(
    "stack,ok",
    [
        ("megatron-core", lambda p: p.schedule != "zb-h1" and p.offload != "params"),
        ("deepspeed", lambda p: p.pp == 1 or (p.zero <= 1 and p.schedule == "1f1b")),
        ("fsdp2", lambda p: p.tp == 1 and p.pp == 1 and p.zero in (0, 2, 3) and p.offload != "optimizer"),
        ("torchtitan", lambda p: p.zero != 1),
    ],
)
def test_a_stack_gets_only_what_it_ships(stack, ok):
    """stacks.toml's restrictions, restated by hand (Megatron-Core has no zero-bubble schedule upstream, DeepSpeed's
    pipeline engine refuses ZeRO-2/3 and interleaving, plain FSDP2 is data parallelism with ZeRO-2/3, torchtitan has
    no ZeRO-1). Would catch the filter not applied, or applied to the wrong field."""
    m, c = model("13B"), cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=256 * 4096, seq=4096, framework=stack)
    ranked = search(m, c, t)
    assert ranked and all(ok(e.plan) for e in ranked)


def test_a_switch_the_stack_lacks_is_one_line_and_exit_2(capsys):
    """DeepSpeed ships no TP communication overlap: asking for it is refused, not silently priced."""
    assert main(["plan", "--model", "7B", "--framework", "deepspeed", "--tp-overlap"]) == 2
    err = capsys.readouterr().err
    assert "deepspeed ships no TP communication overlap" in err and len(err.strip().splitlines()) == 1
