"""How a plan splits the model: layers and parameters of each pipeline stage, and the share one GPU holds.

Shared by the memory model (distlab.planner.memory) and the step-time model (distlab.planner.cost). Pure Python.
"""

from __future__ import annotations

import functools
import math

from distlab.models.shapes import ModelShape
from distlab.planner.config import Plan


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


def local_params(m: ModelShape, p: Plan) -> int:
    """Parameters one GPU holds a slice of: its stage's (the largest stage) / tp."""
    return math.ceil(max(stage_params(m, p.pp)) / p.tp)
