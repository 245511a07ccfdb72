"""The 3D-parallelism rules: the memory model against 16 bytes per parameter counted by hand, the
communication model against closed forms, and the search against the constraints every plan must meet."""

import pytest

from distlab.activations import activation_bytes_per_layer
from distlab.model_shapes import preset
from distlab.parallel_rules import (
    Cluster,
    Workload,
    as_shape,
    memory_per_gpu,
    overheads,
    plans,
    recommend,
    tp_overhead_closed_form,
)

H100_NODE = dict(gpus_per_node=8, hbm_gb=80, peak_tflops=989, intra_gbytes_per_s=450, inter_gbytes_per_s=50)


def test_memory_without_pipeline_is_16_bytes_per_parameter_sharded_by_hand():
    """7B, t=2, d=4: weights and gradients 2+2 bytes per parameter over t, optimizer 12 over t x d
    (ZeRO-1), all 16 over t x d (ZeRO-3). Would catch the untied head forgotten or ZeRO stages swapped."""
    m = preset("7B")
    n = 6_738_415_616  # Llama 2 7B, published config
    w = Workload(recompute="selective")
    for zero, states in ((1, 4 * n / 2 + 12 * n / 8), (3, 16 * n / 8)):
        mem = memory_per_gpu(m, w, tp=2, pp=1, dp=4, cp=1, ep=1, zero=zero, microbatches=8)
        assert mem["weights"] + mem["gradients"] + mem["optimizer"] == pytest.approx(states, rel=1e-12)
        layer = activation_bytes_per_layer(4096, 1, 4096, 32, tp=2, sequence_parallel=True, recompute="selective")
        assert layer == pytest.approx(4096 * 4096 * 34 / 2, rel=1e-12)  # Korthikanti: sbh x 34 / t
        assert mem["activations"] == pytest.approx(32 * layer, rel=1e-12)


def test_first_pipeline_stage_holds_the_same_activations_whatever_p():
    """1F1B: stage 0 keeps p micro-batches of L/p layers, so pipeline parallelism does not shrink it."""
    m, w = preset("70B"), Workload(recompute="selective")
    acts = [memory_per_gpu(m, w, tp=8, pp=p, dp=1, cp=1, ep=1, zero=1, microbatches=64)["activations"]
            for p in (1, 2, 4, 8, 16)]
    assert max(acts) == pytest.approx(min(acts), rel=1e-12)


def test_tp_overhead_matches_closed_form_for_a_gpt_layer():
    """GPT-3's layer is 12h^2 + 13h parameters: the code's TP overhead must equal 2(t-1)F/(9hB) to
    1e-3. Would catch all-reduces counted twice, or bytes counted at 4 per element."""
    m = preset("175B")
    c = Cluster(nodes=8, **H100_NODE)
    for t in (2, 4, 8):
        got = overheads(m, c, Workload(), tp=t, pp=1, dp=8, cp=1, ep=1, zero=1, microbatches=16)["tensor"]
        assert got == pytest.approx(tp_overhead_closed_form(t, 12288, 989e12, 450e9), rel=1e-3)


@pytest.mark.parametrize("model", ["7B", "13B", "70B", "175B"])
@pytest.mark.parametrize("nodes", [1, 8, 32])
def test_every_plan_tiles_the_cluster_fits_and_keeps_tp_in_a_node(model, nodes):
    c = Cluster(nodes=nodes, **H100_NODE)
    for p in plans(model, c):
        assert p.tp * p.pp * p.dp * p.cp == c.gpus
        assert p.tp <= c.gpus_per_node
        assert p.memory_bytes <= p.budget_bytes
    found = plans(model, c)
    if found:
        assert recommend(model, c).overhead == min(p.overhead for p in found)


def test_nothing_fits_returns_none():
    """175B needs 2.8 TB of model states: eight 80 GB GPUs cannot hold it in any plan."""
    assert recommend("175B", Cluster(nodes=1, **H100_NODE)) is None


def test_small_model_on_one_node_is_plain_data_parallel():
    p = recommend("7B", Cluster(nodes=1, **H100_NODE))
    assert (p.tp, p.pp, p.dp) == (1, 1, 8) and p.reasons[0].startswith("fits")


def test_long_sequences_bring_context_parallelism():
    """At 128k tokens even t=8 with full recompute leaves a 70B layer's activations too large without CP."""
    p = recommend("70B", Cluster(nodes=8, **H100_NODE), Workload(seq=131072))
    assert p is not None and p.cp > 1


def test_param_count_shapes():
    """A bare parameter count becomes a Llama-like shape within 25 % of it."""
    for n in (1e9, 7e9, 70e9):
        assert as_shape(n).params() == pytest.approx(n, rel=0.25)
    with pytest.raises(ValueError):
        as_shape(-1)
