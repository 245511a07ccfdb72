"""An MoE's model state as Megatron-Core lays it out: a GPU holds experts / ep of each layer's experts, and their
gradients and optimizer state are sharded over the dp x cp / ep ranks that hold the same experts (expert data
parallelism); the dense part (attention, norms, router, embedding, head) over all dp x cp ranks."""

from __future__ import annotations

import pytest

from distlab.planner.config import Plan, Training, cluster
from distlab.planner.cost import data_parallel_exposed, memory_per_gpu, stage_time
from distlab.planner.moe import moe_model
from distlab.planner.stages import split_params

MIXTRAL_PUBLISHED = 46_702_792_704  # mistralai/Mixtral-8x7B-v0.1, safetensors total
H, F, LAYERS = 4096, 14336, 32


def _mixtral(ep: int, zero: int = 1):
    m, spec = moe_model("Mixtral-8x7B")
    return m, Training(global_batch_tokens=32 * 4096, seq=4096, moe=spec), Plan(dp=8, ep=ep, zero=zero, microbatches=4)


def test_one_gpu_holds_the_whole_model_as_released():
    """TP = EP = 1: dense part and experts add up to the released checkpoint, exactly. Would catch the router
    dropped, or the top-2 experts of the token's path counted instead of all 8."""
    m, t, p = _mixtral(ep=1)
    assert sum(split_params(m, t.moe, p)) == MIXTRAL_PUBLISHED


def test_ep_8_leaves_one_expert_per_layer_on_each_gpu():
    """8 experts over EP 8: each GPU holds one expert of three h x f matrices per layer. Would catch a GPU charged the
    two experts a token visits (the planner's old count)."""
    m, t, p = _mixtral(ep=8)
    assert split_params(m, t.moe, p)[1] == LAYERS * 3 * H * F


@pytest.mark.parametrize("ep", [2, 8])
def test_ep_shrinks_the_experts_weights_not_their_optimizer_state(ep):
    """ZeRO-1 on 8 GPUs: with EP a GPU holds 1/ep of the experts, but their master weights and moments are sharded
    over only 8 / ep ranks, so the optimizer state per GPU is the same as without EP (8 experts / 8 ranks) while
    the bf16 weights and gradients shrink. Would catch expert state sharded over all 8 ranks under EP."""
    m, t, p1 = _mixtral(ep=1)
    _, _, pe = _mixtral(ep=ep)
    c = cluster("H100-SXM", nodes=1)
    base, with_ep = memory_per_gpu(m, c, t, p1), memory_per_gpu(m, c, t, pe)
    assert with_ep.optimizer == pytest.approx(base.optimizer, rel=1e-9)
    experts = LAYERS * 8 * 3 * H * F
    assert base.weights - with_ep.weights == pytest.approx(2 * experts * (1 - 1 / ep), rel=1e-9)


def test_expert_gradients_are_synced_over_their_own_group():
    """DDP-style sync on 8 GPUs: without EP every expert's gradient is reduced across the 8 ranks (the experts are
    3.5 times the dense part); with EP 8 each expert lives on one GPU and needs no sync. Would catch the experts'
    gradients left out of the data-parallel traffic."""
    c = cluster("H100-SXM", nodes=1)
    totals = []
    for ep in (1, 8):
        m, t, p = _mixtral(ep=ep)
        st = stage_time(m, c, t, p, m.layers, first=True, last=True)
        totals.append(data_parallel_exposed(m, c, t, p, st, m.layers)[1])
    assert totals[0] > 10 * totals[1]
