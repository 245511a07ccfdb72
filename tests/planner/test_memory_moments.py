"""Backward's three moments (the loss's backward, the first layer's, backward's end) against bytes counted by hand
for awkward shapes, and FSDP2's root and layer gradient. References: parameter counts written out here from the
shapes, not the planner's own sums."""

import math

import pytest

from distlab.models.shapes import ModelShape
from distlab.planner.config import Plan, Training, cluster
from distlab.planner.memory import memory_per_gpu

# an awkward Llama-like shape: 3 layers, width 96, 97 tokens, vocabulary 257
M = ModelShape(name="odd", layers=3, hidden=96, heads=4, kv_heads=2, ffn=257, vocab=257, seq=97, mlp="swiglu")


def _layer_params() -> int:
    h, kv, f = 96, 2 * 24, 257
    return h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h  # q, k, v, o, gate, up, down, two norms


def test_the_loss_moment_holds_no_weight_gradient():
    """One GPU, no accumulation: at the loss's backward no weight gradient exists, so the backward peak is the
    larger of (activations + logits and their gradients) and (every gradient + what activations are left), never
    their sum. Would catch the old rule that added every gradient to the loss's working set."""
    t = Training(global_batch_tokens=97, seq=97, precision="bf16", loss="eager")
    mem = memory_per_gpu(M, cluster("H100-SXM"), t, Plan(dp=1, zero=0))
    held = mem.weights + mem.optimizer
    start = held + mem.activations + mem.logits + mem.logits_backward
    end = held + mem.gradients + mem.activations - mem.activations_freed
    assert mem.gradients_in_forward == 0.0
    assert mem.phases["backward"] == pytest.approx(max(start, end), rel=1e-12)
    assert mem.phases["backward"] < held + mem.gradients + mem.activations + mem.logits + mem.logits_backward
    # the micro-batch's backward frees all its layers but the last one to run: (layers - 1) / layers of them
    assert mem.activations_freed == pytest.approx(mem.activations * 2 / 3, rel=1e-12)


def test_fsdp2_root_and_layer_gradient_counted_by_hand():
    """FSDP2 over 3 GPUs: the root (embedding 257 x 96, output 257 x 96, final norm 96) stays gathered in bf16, and
    the first layer's backward holds that layer's whole bf16 gradient. torchtitan keeps its last block gathered at
    the loss, plain FSDP2 none. Would catch the root left out (the tracker's 70B peak under-predicted) or the layer
    gradient sharded before its reduce-scatter."""
    root = 2 * (257 * 96 + 257 * 96 + 96)
    layer = 2 * _layer_params()
    for framework, kept in (("fsdp2", 0), ("torchtitan", 1)):
        t = Training(global_batch_tokens=3 * 97, seq=97, framework=framework)
        mem = memory_per_gpu(M, cluster("H100-SXM", gpus_per_node=3), t, Plan(dp=3, zero=3))
        assert mem.root_gather == pytest.approx(root, rel=1e-12)
        assert mem.layer_grads == pytest.approx(layer, rel=1e-12)
        assert mem.gather_at_loss == pytest.approx(kept * layer, rel=1e-12)
    megatron = memory_per_gpu(
        M, cluster("H100-SXM", gpus_per_node=3), Training(global_batch_tokens=3 * 97, seq=97), Plan(dp=3, zero=3)
    )
    assert megatron.root_gather == 0.0 and megatron.layer_grads == 0.0 and megatron.gather_at_loss is None


def test_accumulated_gradients_stay_in_every_backward_moment():
    """With gradient accumulation the gradients persist from the first micro-batch: the loss's moment includes
    them. Would catch the split dropping accumulated gradients (an under-count for every accumulating plan)."""
    t = Training(global_batch_tokens=4 * 97, seq=97, precision="bf16")
    mem = memory_per_gpu(M, cluster("H100-SXM"), t, Plan(dp=1, zero=0, microbatches=4))
    assert mem.gradients_in_forward == mem.gradients > 0
    start = mem.weights + mem.optimizer + mem.gradients + mem.activations + mem.logits + mem.logits_backward
    assert mem.phases["backward"] >= start * (1 - 1e-12)
    assert math.isclose(mem.backward_start, start, rel_tol=1e-12)


def test_llama3_405b_first_stage_holds_every_micro_batch():
    """Llama 3 405B at TP 8 / PP 16 / DP 128, 16 micro-batches of one 8K sequence: the first stage holds
    ceil(126 / 16) = 8 layers x 16 micro-batches of activations under 1F1B (min(p, m) in flight). Would catch the
    in-flight count dropping below the schedule's (an optimistic fit) or the stage's layers miscounted."""
    from distlab.models.shapes import catalog
    from distlab.planner.memory import activation_bytes, in_flight

    m = catalog()["Llama-3-405B"]
    t = Training(global_batch_tokens=2048 * 8192, seq=8192)
    p = Plan(tp=8, pp=16, dp=128, zero=2, micro_batch=1, microbatches=16)
    assert in_flight(p, 0) == 16 and in_flight(p, 15) == 1
    mem = memory_per_gpu(m, cluster("H100-SXM", nodes=2048), t, p)
    assert mem.activations == pytest.approx(math.ceil(126 / 16) * 16 * activation_bytes(m, t, p), rel=1e-12)
