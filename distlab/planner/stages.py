"""How a plan splits the model: layers and parameters of each pipeline stage, and the share one GPU holds.

Shared by the memory model (distlab.planner.memory) and the step-time model (distlab.planner.cost). Pure Python.
"""

from __future__ import annotations

import functools
import math

from distlab.models.shapes import ModelShape
from distlab.planner.config import Plan
from distlab.planner.moe import MoESpec, path_excess_per_layer, routed_per_layer


@functools.lru_cache(maxsize=4096)
def stage_layers(m: ModelShape, pp: int) -> tuple[int, ...]:
    """Layers of each pipeline stage: as even as the layer count allows, the first stages taking one more (126
    layers on 8 stages: 16 x 6 and 15 x 2)."""
    base, extra = divmod(m.layers, pp)
    return tuple(base + (1 if s < extra else 0) for s in range(pp))


def embedding_params(m: ModelShape) -> int:
    return m.vocab * m.hidden + (m.seq * m.hidden if m.mlp == "gelu" else 0)


def head_params(m: ModelShape, pp: int) -> int:
    """The output head (untied, or tied but on another stage than the embedding) and the final norm."""
    norm = m.hidden if m.mlp == "swiglu" else 2 * m.hidden
    return (m.vocab * m.hidden if (not m.tie_embeddings or pp > 1) else 0) + norm


@functools.lru_cache(maxsize=4096)
def stage_params(m: ModelShape, pp: int) -> tuple[int, ...]:
    """Parameters held by each stage: its layers, the embedding on the first, the head and final norm on the last.
    With pp = 1 the whole model."""
    if pp == 1:
        return (m.params(),)
    out = [n * m.params_per_layer() for n in stage_layers(m, pp)]
    out[0] += embedding_params(m)
    out[-1] += head_params(m, pp)
    return tuple(out)


# ---------------------------------------------------------------- a mixture of experts' split
def stage_moe_layers(m: ModelShape, spec: MoESpec, pp: int, stage: int) -> int:
    """MoE layers of pipeline stage `stage`: its layers past the leading dense ones (DeepSeek-V3's first 3)."""
    layers = stage_layers(m, pp)
    start = sum(layers[:stage])
    return max(0, start + layers[stage] - max(start, spec.dense_layers))


def split_params(m: ModelShape, spec: MoESpec | None, p: Plan, stage: int | None = None) -> tuple[int, int]:
    """(dense, routed) parameters one GPU of pipeline stage `stage` (None: the largest stage) holds before ZeRO. The
    dense part (attention, norms, router, embedding and head) is sharded by ZeRO over the dp x cp group, the routed
    experts over the expert-data-parallel group of dp x cp / ep ranks that hold the same experts (Megatron-Core's
    expert data parallelism): with EP, a GPU's own experts have fewer ranks to shard over. Dense models: (local, 0)."""
    sizes = stage_params(m, p.pp)
    stage = max(range(p.pp), key=lambda s: sizes[s]) if stage is None else stage
    local = math.ceil(sizes[stage] / p.tp)
    if spec is None:
        return local, 0
    n = stage_moe_layers(m, spec, p.pp, stage)
    return local - n * path_excess_per_layer(m, spec, p.tp), n * routed_per_layer(m, spec, p.tp, p.ep)


def layer_params_local(m: ModelShape, spec: MoESpec | None, p: Plan) -> tuple[int, int]:
    """(dense, routed) parameters of one layer on one GPU (an MoE layer for an MoE model): what ZeRO-3 gathers."""
    dense = math.ceil(m.params_per_layer() / p.tp)
    if spec is None:
        return dense, 0
    return dense - path_excess_per_layer(m, spec, p.tp), routed_per_layer(m, spec, p.tp, p.ep)


def expert_group(p: Plan) -> int:
    """Ranks that hold the same experts and shard their model state: dp x cp / ep (within one HSDP replica)."""
    return max(1, p.shard_group // p.ep)
