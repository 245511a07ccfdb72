"""Mixture-of-experts models as the planner sees them: the dense path a token takes, and the experts beside it.

A MoE layer replaces the MLP by `experts` SwiGLU experts of width `moe_ffn` (plus `shared_experts` every token
passes through); each token goes to `top_k` of them. So one token's compute is that of a dense layer whose MLP
is (top_k + shared) x moe_ffn wide, which is the ModelShape `dense_path` returns (the cost model times it as
any dense model), while the parameters and their model state are all the experts', split over EP ranks and
sharded over the ranks that hold the same experts (distlab.planner.stages.split_params). Expert parallelism moves
each token to the GPU of its experts and back: a dispatch and a combine all-to-all per MoE layer, forward and
backward (distlab.planner.cost), inside the NVLink domain when tp x ep fits in a node, over the NICs otherwise.

Shapes come from distlab/data/moe_models.toml (Mixtral 8x7B, DeepSeek-V3; DeepSeek's multi-head latent
attention is timed as ordinary attention over its heads, a stated simplification).
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.core.facts import entries
from distlab.models.shapes import ModelShape


@dataclass(frozen=True, kw_only=True)
class MoESpec:
    """The experts of a mixture-of-experts model."""

    experts: int
    top_k: int
    moe_ffn: int
    shared_experts: int = 0
    dense_layers: int = 0
    """Leading layers that keep a dense MLP (DeepSeek-V3's first 3)."""

    def __post_init__(self) -> None:
        for name in ("experts", "top_k", "moe_ffn", "shared_experts", "dense_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"MoE: {name} must be a non-negative integer, got {v!r}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"MoE: top_k must be between 1 and experts ({self.experts}), got {self.top_k}")
        if self.moe_ffn < 1:
            raise ValueError(f"MoE: moe_ffn must be positive, got {self.moe_ffn}")

    def moe_layers(self, layers: int) -> int:
        return max(0, layers - self.dense_layers)

    def expert_params_per_layer(self, hidden: int) -> int:
        """Parameters of one MoE layer's routed experts (three SwiGLU matrices each) and its router."""
        return self.experts * 3 * hidden * self.moe_ffn + hidden * self.experts


def moe_names() -> list[str]:
    return list(entries("moe_models"))


def moe_model(name: str) -> tuple[ModelShape, MoESpec]:
    """(the dense path a token takes, the experts) of a model in moe_models.toml."""
    rows = entries("moe_models")
    if name not in rows:
        raise ValueError(f"unknown MoE model {name!r}; known: {', '.join(rows)}")
    return moe_from_row(name, rows[name])


MOE_KEYS = ("experts", "top_k", "moe_ffn", "shared_experts", "dense_layers")
"""What a JSON model adds to a dense shape to be a mixture of experts (moe_models.toml's names)."""


def moe_from_row(name: str, r: dict) -> tuple[ModelShape, MoESpec]:
    """(the dense path, the experts) from a row with moe_models.toml's keys: a built-in model's, or a JSON file's
    (distlab.planner.plan_command.resolve_model), so both are priced by the same lines. moe_ffn defaults to ffn;
    head_dim, where given, is the attention heads' width (Qwen3: wider than hidden / heads)."""
    if r.get("experts", 0) < 1:
        raise ValueError(f"model {name}: a mixture of experts needs experts >= 1")
    if "moe_ffn" not in r and "ffn" not in r:
        raise ValueError(f"model {name}: an MoE model needs moe_ffn (each routed expert's width)")
    r = {**r, "moe_ffn": r.get("moe_ffn", r.get("ffn"))}
    spec = MoESpec(
        experts=r["experts"],
        top_k=r["top_k"],
        moe_ffn=r["moe_ffn"],
        shared_experts=r.get("shared_experts", 0),
        dense_layers=r.get("dense_layers", 0),
    )
    active = (spec.top_k + spec.shared_experts) * spec.moe_ffn
    m = ModelShape(
        name=r.get("name", name),
        layers=r["layers"],
        hidden=r["hidden"],
        heads=r["heads"],
        kv_heads=r.get("kv_heads", r["heads"]),
        ffn=active,
        vocab=r["vocab"],
        seq=r.get("seq", 4096),
        mlp="swiglu",
        tie_embeddings=r.get("tie_embeddings", False),
        head_dim=r.get("head_dim", 0),
    )
    return m, spec


def routed_per_layer(m: ModelShape, spec: MoESpec, tp: int, ep: int) -> int:
    """One MoE layer's routed experts on one GPU: experts / ep of them, each split by tp (Megatron-Core's expert
    tensor parallelism defaults to TP)."""
    return spec.experts // ep * 3 * m.hidden * spec.moe_ffn // tp


def path_excess_per_layer(m: ModelShape, spec: MoESpec, tp: int) -> int:
    """What the dense path's layer counts that is not the layer's dense part: the top_k routed experts its MLP width
    includes, less the router it lacks (hidden x experts; the router is not split by TP)."""
    return 3 * m.hidden * spec.top_k * spec.moe_ffn // tp - m.hidden * spec.experts
