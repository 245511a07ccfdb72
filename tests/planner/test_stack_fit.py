"""`--framework any` means any ONE stack: a plan is ranked only if one stack of stacks.toml runs all of its features
together (issue 25's follow-up: the 70B answer combined Megatron's ZeRO-1 with torchtitan's ZB-H1)."""

from __future__ import annotations

import json

import pytest

from distlab.core.cli import main
from distlab.planner.config import Training, cluster, model
from distlab.planner.search import NothingFits, search

# stacks.toml restated by hand from its sources (Megatron-LM arguments.py: distributed optimizer, no zero-bubble
# schedule, optimizer CPU offload; torchtitan: FSDP2 without a ZeRO-1 mode, ZB via torch.distributed.pipelining,
# CPUOffloadPolicy offloads parameters; DeepSpeed: PipelineEngine asserts ZeRO < 2, plain 1F1B; plain FSDP2: data
# parallelism only; DeepSpeed's long-sequence parallelism is Ulysses, not ring-attention CP). Each predicate: can
# that stack run plan p (with TP overlap asked or not)?
BY_HAND = {
    "megatron-core": lambda p, ov: (p.pp == 1 or (p.schedule != "zb-h1" and p.zero <= 1)) and p.offload != "params",
    "torchtitan": lambda p, ov: p.zero != 1 and p.offload != "optimizer",
    "deepspeed": lambda p, ov: (
        (p.pp == 1 or (p.schedule == "1f1b" and p.zero <= 1)) and not (ov and p.tp > 1) and p.cp == 1
    ),
    "fsdp2": lambda p, ov: p.tp == p.pp == p.cp == p.ep == 1 and p.zero != 1 and p.offload != "optimizer",
}


def _runs_somewhere(p, overlap: bool = False) -> list[str]:
    return [name for name, ok in BY_HAND.items() if ok(p, overlap)]


def _plan_json(capsys, *argv: str) -> list[dict]:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "name,nodes,tokens,overlap",
    [("70B", 8, 4 * 2**20, False), ("13B", 2, 256 * 4096, False), ("13B", 2, 256 * 4096, True)],
)
def test_any_ranks_only_plans_one_stack_runs_whole(name, nodes, tokens, overlap):
    """Every ranked plan under the default passes at least one stack's hand-written predicate. Would catch "any"
    back to combining features freely (ZeRO-1 with ZB-H1, ZeRO-2 beside a Megatron pipeline), or TP overlap granted
    to a plan only DeepSpeed (no TP overlap) could run."""
    m, c = model(name), cluster("H100-SXM", nodes=nodes)
    t = Training(global_batch_tokens=tokens, seq=4096, tp_overlap=overlap)
    ranked = search(m, c, t)
    assert ranked
    bad = [e.plan.label() for e in ranked if not _runs_somewhere(e.plan, overlap)]
    assert not bad, bad[:3]


def test_unrestricted_finds_the_shipless_combination_the_default_refuses():
    """The freer search's 70B winner is a combination no stack ships (the old answer: ZeRO-1 + optimizer offload +
    ZB-H1), and it is faster than the default's; the default's is not that plan. Would catch the flag doing nothing,
    or the filter inverted."""
    m, c = model("70B"), cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=4 * 2**20, seq=4096)
    free = search(m, c, t, unrestricted=True)[0]
    best = search(m, c, t)[0]
    assert _runs_somewhere(free.plan) == []
    assert (free.plan.zero, free.plan.schedule) == (1, "zb-h1")
    assert _runs_somewhere(best.plan) and best.plan.schedule != "zb-h1"
    assert free.step_seconds < best.step_seconds


def _plan_of(p: dict):
    from distlab.planner.config import Plan

    return Plan(
        tp=p["tp"],
        pp=p["pp"],
        dp=p["dp"],
        cp=p["cp"],
        ep=p["ep"],
        zero=p["zero"],
        micro_batch=p["micro_batch"],
        microbatches=p["grad_accumulation"],
        recompute=p["recompute"],
        offload=p["offload"],
        schedule=p["schedule"],
        virtual=p["virtual"],
        dp_replicate=p["dp_replicate"],
    )


def test_context_and_expert_parallel_plans_name_only_stacks_that_ship_them(capsys):
    """Mixtral on 16 H100s: plans with ring-attention CP are not credited to DeepSpeed (Ulysses is another
    mechanism) nor to plain FSDP2, and the list matches the hand predicates. Would catch stacks.toml's cp/ep columns
    ignored by the filter."""
    plans = _plan_json(capsys, "--model", "Mixtral-8x7B", "--nodes", "2", "--top", "8")
    assert any(p["cp"] > 1 for p in plans)
    for p in plans:
        assert p["stacks"] == _runs_somewhere(_plan_of(p)) != []
        if p["cp"] > 1:
            assert "deepspeed" not in p["stacks"] and "fsdp2" not in p["stacks"]


def test_json_names_the_stacks_and_the_cost_of_realism(capsys):
    """Each plan's `stacks` equals the hand predicates' list; the recommended plan's `unrestricted_plan` gives the
    freer plan and faster_fraction = our step / its step - 1, checked against the unrestricted run's own JSON; the
    explanation says it in one line. Would catch a missing key, a stack list from the wrong plan, or the ratio
    inverted."""
    plans = _plan_json(capsys, "--model", "70B", "--nodes", "8", "--top", "4")
    for p in plans:
        assert p["stacks"] == _runs_somewhere(_plan_of(p)) != []
    free = _plan_json(capsys, "--model", "70B", "--nodes", "8", "--top", "1", "--framework", "unrestricted")[0]
    assert free["stacks"] == [] and free["unrestricted_plan"] is None
    un = plans[0]["unrestricted_plan"]
    assert un["label"] == free["label"]
    assert un["faster_fraction"] == pytest.approx(plans[0]["step_seconds"] / free["step_seconds"] - 1, rel=1e-9)
    assert un["faster_fraction"] > 0
    line = next(r for r in plans[0]["reasons"] if r.startswith("Runs on "))
    assert "a combination no stack ships" in line and free["label"] in line
    assert any(r.startswith("No single stack ships") for r in free["reasons"])


def test_a_fixed_shipless_layout_is_one_line_and_exit_2(capsys):
    """ZeRO-1 with ZB-H1 fixed under the default is refused in one line that names the way out; unrestricted prices
    it. Would catch a traceback, or the fixed layout silently priced."""
    argv = ["plan", "--model", "70B", "--nodes", "8", "--tp", "2", "--pp", "8", "--zero", "1", "--schedule", "zb-h1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no single stack" in err and "--framework unrestricted" in err
    assert main([*argv, "--framework", "unrestricted", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["schedule"] == "zb-h1"


def test_a_named_stack_never_reports_another():
    """Under --framework torchtitan the search stays that stack's (its own stack list), and a layout it lacks
    (ZeRO-1) is NothingFits, not a plan. Would catch "any"'s union leaking into a named stack."""
    m, c = model("13B"), cluster("H100-SXM", nodes=2)
    t = Training(global_batch_tokens=256 * 4096, seq=4096, framework="torchtitan")
    with pytest.raises(NothingFits, match="torchtitan"):
        search(m, c, t, fixed={"zero": 1})


def test_the_offload_line_states_host_memory_per_node_and_its_bound(capsys):
    """The 70B recommendation offloads the optimizer: its explanation names the host bytes per node (the JSON's
    host_bytes_per_gpu x 8 GPUs per node, against the DGX H100's 2 TB) and says the update's price is a lower bound.
    Would catch host memory per GPU printed as per node, or the CPU update sold as an exact cost."""
    first = _plan_json(capsys, "--model", "70B", "--nodes", "8", "--top", "1")[0]
    assert first["offload"] == "optimizer"
    line = next(r for r in first["reasons"] if r.startswith("Offloading"))
    assert f"host memory {first['host_bytes_per_gpu'] * 8 / 1e9:.0f} GB per node of 2,000 GB" in line
    assert "lower bound" in line
