"""Chapter 7's decision rules (distlab.planner.rules) against expectations worked out by hand from the
model shapes and ZeRO's 2 + 2 + 12 bytes per parameter, and the rule-pruned planner against the
exhaustive one: the rules must never drop the best plan."""

import math

import pytest

from distlab.models.shapes import ModelShape, preset
from distlab.planner.config import Plan, Training, cluster, usable_bytes
from distlab.planner.cost import memory_per_gpu, stage_time
from distlab.planner.rules import (
    context_sizes,
    expert_parallel,
    pipeline_sizes,
    tensor_sizes,
    tp_overhead_closed_form,
    zero_stage,
)
from distlab.planner.search import RULES, candidates, search

H100x8 = cluster("H100-SXM", nodes=8)
BATCH = 4 * 1024 * 1024
BUDGET = usable_bytes(H100x8.gpu)  # 81,559 MiB reported, less the CUDA context and 5 % fragmentation


def pretrain(m, seq=None):
    return Training(global_batch_tokens=BATCH, seq=seq or m.seq)


def test_tensor_sizes_divide_heads_and_stay_in_the_node():
    """Llama 2 70B: 64 heads, 8 KV heads, FFN 28672 -> 1, 2, 4, 8 on 8-GPU nodes; a 12-head model stops at
    4 (8 does not divide 12); 6-GPU nodes allow only 1 and 2 (4 does not divide 6 x nodes). Lifting the
    node limit on 16 nodes lets 70B go no further than its 8 KV heads. Would catch TP across nodes or a
    size that leaves a GPU half a head."""
    assert tensor_sizes(preset("70B"), H100x8).value == [1, 2, 4, 8]
    twelve = ModelShape(layers=4, hidden=768, heads=12, ffn=3072, vocab=1000, mlp="gelu")
    assert tensor_sizes(twelve, H100x8).value == [1, 2, 4]
    assert tensor_sizes(preset("7B"), cluster("H100-SXM", gpus_per_node=6, nodes=3)).value == [1, 2]
    assert tensor_sizes(preset("7B"), cluster("H100-SXM", nodes=2), within_node=False).value == [1, 2, 4, 8, 16]
    assert tensor_sizes(preset("70B"), cluster("H100-SXM", nodes=16), within_node=False).value == [1, 2, 4, 8]


def test_context_sizes_only_for_long_sequences():
    """4096 tokens: no CP. 131072 tokens on 64 GPUs at t = 2: every power of two up to 32. 24576 = 3 x 2^13
    tokens on 64 GPUs at t = 1: 2c must divide it, so up to 64. Would catch CP at short lengths or a chunk
    count that does not divide the sequence."""
    seven = preset("7B")
    assert context_sizes(seven, H100x8, pretrain(seven), 1).value == [1]
    assert context_sizes(seven, H100x8, pretrain(seven, 131072), 2).value == [1, 2, 4, 8, 16, 32]
    t = Training(global_batch_tokens=24576 * 64, seq=24576)
    assert context_sizes(seven, H100x8, t, 1).value == [1, 2, 4, 8, 16, 32, 64]
    assert context_sizes(seven, H100x8, pretrain(seven), 1, long_only=False).value == [1, 2, 4, 8, 16, 32, 64]


def test_pipeline_only_when_zero1_without_one_does_not_fit():
    """70B (69.0e9 parameters) on 64 H100s. At t = 2, ZeRO-1 keeps 4 bytes per parameter / t unsharded:
    138 GB > 80.5 GB usable, so pipelines are allowed (any stage count up to the 80 layers that tiles the 32
    GPUs left: 1-32; uneven stages are allowed). At t = 8 it is 34.5 GB + 12 x 69e9 / 64 = 12.9 GB +
    activations: it fits, so no pipeline. Would catch the rule reading the wrong ZeRO stage or forgetting the
    optimizer's sharding."""
    m = preset("70B")
    n = m.params()
    assert 4 * n / 2 > BUDGET and 4 * n / 8 + 12 * n / 64 < BUDGET - 12e9
    t = pretrain(m)
    assert pipeline_sizes(m, H100x8, t, 2, 1).value == [1, 2, 4, 8, 16, 32]
    assert pipeline_sizes(m, H100x8, t, 8, 1).value == [1]
    assert pipeline_sizes(m, H100x8, t, 8, 1, only_when_needed=False).value == [1, 2, 4, 8]


def test_zero_stage_is_the_lowest_that_fits():
    """7B (6.74e9 parameters) on 8 GPUs, t = 1: DDP holds 16 bytes per parameter = 108 GB (no), ZeRO-1
    2 + 2 + 12/8 = 5.5 bytes = 37 GB plus activations (yes). Would catch the stages tried out of order."""
    m, c = preset("7B"), cluster("H100-SXM")
    n = m.params()
    assert 16 * n > BUDGET and 5.5 * n < 0.6 * BUDGET
    t = Training(global_batch_tokens=64 * 4096, seq=4096)
    assert zero_stage(m, c, t, Plan(dp=8, zero=3, microbatches=8)).value == 1
    assert (
        zero_stage(
            preset("175B"), c, Training(global_batch_tokens=8 * 2048, seq=2048), Plan(tp=8, microbatches=8)
        ).value
        is None
    )


def test_expert_parallel_smallest_ep_that_fits_by_hand():
    """7B with 8 SwiGLU experts per layer on the dense plan TP 1 x DP 64, ZeRO-2: each GPU holds 8/EP experts
    of 3 x 4096 x 11008 parameters in each of 32 layers; beyond the dense MLP that is 32 x 3hf x (8/EP - 1)
    parameters, bf16 weights whole and 2 + 12 bytes sharded over the 64/EP replicas. The rule must pick the
    smallest EP (dividing 8 and 64) whose total fits. Would catch experts counted without the dense MLP
    they replace, or ZeRO sharding over all 64 ranks instead of each expert's replicas."""
    m = preset("7B")
    t = pretrain(m)
    p = Plan(dp=64, zero=2, micro_batch=1, microbatches=16)
    base = memory_per_gpu(m, H100x8, t, p).device_bytes
    expected = None
    for ep in (1, 2, 4, 8):
        extra = 32 * 3 * 4096 * 11008 * (8 // ep - 1)
        if base + 2 * extra + 14 * math.ceil(extra / (64 // ep)) <= BUDGET:
            expected = ep
            break
    got = expert_parallel(m, H100x8, t, p, experts=8, top_k=2)
    assert expected is not None and got.value == expected
    assert expert_parallel(m, H100x8, t, p, experts=1, top_k=1).value == 1  # dense: nothing to spread
    with pytest.raises(ValueError):
        expert_parallel(m, H100x8, t, p, experts=2, top_k=3)


REQUESTS = [
    ("7B", 1, None),
    ("13B", 8, None),
    ("70B", 8, None),
    ("70B", 128, None),
    ("175B", 8, None),
    ("175B", 128, None),
    ("70B", 8, 131072),
]


@pytest.mark.parametrize(("name", "nodes", "seq"), REQUESTS)
def test_tp_and_pp_rules_drop_no_best_plan(name, nodes, seq):
    """The search with every rule finds the same best plan (same step time, same sizes) as the search with
    TP across nodes and pipelines everywhere allowed, and sees no more candidates. Would catch a rule that
    prunes the winner, e.g. "no pipeline" applied where ZeRO-1 does not fit."""
    m = preset(name)
    c, t = cluster("H100-SXM", nodes=nodes), pretrain(m, seq)
    ruled, free = search(m, c, t)[0], search(m, c, t, rules=("cp-long-only",))[0]
    assert ruled.step_seconds == pytest.approx(free.step_seconds, rel=1e-12)
    assert (ruled.plan.tp, ruled.plan.pp, ruled.plan.cp) == (free.plan.tp, free.plan.pp, free.plan.cp)
    assert sum(1 for _ in candidates(m, c, t)) <= sum(1 for _ in candidates(m, c, t, ("cp-long-only",)))
    if seq:  # long sequences: the CP rule lifts nothing, so the fully exhaustive search agrees too
        assert search(m, c, t, rules=())[0].step_seconds == pytest.approx(ruled.step_seconds, rel=1e-12)


def test_the_cp_length_cut_is_a_practice_rule_the_cost_model_disagrees_with():
    """At 4096 tokens the cost model finds CP 2 (its ring hides behind attention) a little faster than TP 2
    for 70B on 64 H100s; the planner still skips CP below 16k tokens. This pins the gap the page quotes:
    under 10 %."""
    m = preset("70B")
    t = pretrain(m)
    ruled, exhaustive = search(m, H100x8, t)[0], search(m, H100x8, t, rules=())[0]
    assert exhaustive.plan.cp > 1 and ruled.plan.cp == 1
    assert 0 < ruled.step_seconds / exhaustive.step_seconds - 1 < 0.10


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown rules"):
        next(candidates(preset("7B"), H100x8, pretrain(preset("7B")), ("tp-in-node", "no-such-rule")))
    assert set(RULES) == {"tp-in-node", "cp-long-only", "pp-when-needed"}


def test_planner_tp_cost_matches_closed_form_for_a_gpt_layer():
    """GPT-3's layer has 12h^2 matmul parameters: without overlap, the planner's TP collectives over its matmul
    time must be 2(t-1)F/(9hB) with F the sustained matmul rate and B the fitted NVLink bus bandwidth, within
    3 % (NCCL's latency at a 64-sequence micro-batch, partial GEMM waves). Would catch collectives counted
    twice, activations at 4 bytes, or overlap applied when it is switched off."""
    from dataclasses import replace

    from distlab.hardware.collectives import fitted_bus_bandwidth
    from distlab.planner.kernels import matmul_fraction

    m, c = preset("175B"), cluster("H100-SXM")
    t = replace(Training(global_batch_tokens=64 * 2048, seq=2048), tp_overlap=False)
    p = Plan(tp=8, micro_batch=64)
    st = stage_time(m, c, t, p, 1, first=False, last=False)
    f = c.gpu.peak_flops("bf16") * matmul_fraction(c.gpu)
    matmul = 3 * 2 * 64 * 2048 * 12 * 12288**2 / 8 / f  # forward and backward of one layer's weight matmuls
    ratio = st.exposed_tp / matmul
    assert ratio == pytest.approx(tp_overhead_closed_form(8, 12288, f, fitted_bus_bandwidth(c.intra)), rel=0.03)
    assert tp_overhead_closed_form(8, 8192, 989e12, 450e9) == pytest.approx(14 * 989e12 / (9 * 8192 * 450e9))


def test_first_pipeline_stage_holds_the_same_activations_whatever_p():
    """1F1B: stage 0 keeps p micro-batches of L/p layers, so pipeline parallelism does not shrink it."""
    m = preset("70B")
    t = pretrain(m)
    acts = [
        memory_per_gpu(m, H100x8, t, Plan(tp=8, pp=p, dp=8 // p, microbatches=64)).activations for p in (1, 2, 4, 8)
    ]
    assert max(acts) == pytest.approx(min(acts), rel=1e-12)
