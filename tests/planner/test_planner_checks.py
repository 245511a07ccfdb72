"""Chapter 12's by-hand references (distlab.planner.planner_checks, worked_plan_checks.plan_memory) against the
planner: they agree where the page shows a number, and the fit-set comparison can fail."""

from distlab.planner.config import Plan, Training, cluster, model
from distlab.planner.memory import memory_per_gpu
from distlab.planner.planner_checks import kept_by_hand, layer_forward_flops
from distlab.planner.worked_plan_checks import budget, plan_memory


def test_70b_pipeline_plans_by_hand_equal_the_planner():
    """Grouped-query attention, an uneven split (80 layers over 32 stages), interleaving, ZeRO-3 under a pipeline and
    ZeRO-1 with offload: each by hand equals the planner's bytes to the byte."""
    m, c = model("70B"), cluster("H100-SXM", nodes=8)
    t = Training(global_batch_tokens=1024 * 4096, seq=4096)
    plans = [
        Plan(tp=2, pp=32, dp=1, micro_batch=1, microbatches=1024),
        Plan(tp=4, pp=2, dp=8, zero=1, micro_batch=1, microbatches=128, schedule="interleaved", virtual=4),
        Plan(tp=4, pp=2, dp=8, zero=3, micro_batch=1, microbatches=128, schedule="zb-h1"),
        Plan(tp=2, pp=8, dp=4, zero=1, micro_batch=1, microbatches=256, offload="optimizer"),
    ]
    for p in plans:
        assert plan_memory(p, 4096, "70B")["device"] == memory_per_gpu(m, c, t, p).device_bytes, p.label()


def test_fit_sets_move_with_the_budget():
    """A budget 2 % smaller keeps fewer 7B plans: the fit-set claim sees a change of the memory model."""
    c = cluster("H100-SXM")
    plans = [Plan(dp=8, zero=z, micro_batch=b, microbatches=8 // b) for z in (0, 1, 2, 3) for b in (1, 2, 4, 8)]
    usable, host = budget("H100-SXM"), c.host_bytes / c.gpus_per_node
    tight = kept_by_hand(plans, 4096, "7B", 0.98 * usable, host, 0.08)
    assert tight < kept_by_hand(plans, 4096, "7B", usable, host, 0.08)


def test_layer_forward_flops_of_70b_by_the_config():
    """One Llama 2 70B layer, TP 1, one 4096-token sequence: 2 x 855,638,016 weight FLOPs per token (without the
    norms) plus 2 x 4096 x 8192 of causal attention."""
    weights = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    assert layer_forward_flops(1, 4096, 4096) == (2 * weights + 2 * 4096 * 8192) * 4096
