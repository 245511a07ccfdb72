"""Shapes of real models (presets or a JSON file), their exact parameter counts, and the architecture of one
layer (`BlockShape`) that the activation closed forms (distlab.memory.layer_activations) and the counted torch
blocks (distlab.models.decoder) are both built from.

Two families are told apart by `mlp`, and the other architectural choices default to the family's:
- "swiglu" (Llama): RMSNorm, RoPE, no biases, no dropout;
- "gelu" (GPT): LayerNorm, learned positions, biases everywhere, dropout (Korthikanti et al.'s convention).
A mixture-of-experts model (Mixtral) replaces the MLP of its MoE layers by `experts` SwiGLU experts of width
`moe_ffn`, `top_k` of which process each token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from distlab.core.facts import entries

MLPS = ("swiglu", "gelu")
NORMS = ("rmsnorm", "layernorm")
DATA_FILES = ("models", "llama3_models", "moe_models")  # what catalog() reads; models.toml alone is presets()
NOT_SHAPE = ("source", "sources", "params_published")  # entry keys that are not ModelShape fields


@dataclass(frozen=True, kw_only=True)
class BlockShape:
    """One transformer layer's architecture: everything its activation bytes depend on besides s, b and the
    training settings (recompute, attention kernel, parallelism)."""

    hidden: int
    """Model width h."""
    heads: int
    """Attention (query) heads a."""
    kv_heads: int
    """Key/value heads g (grouped-query attention); g = a is multi-head attention."""
    ffn: int
    """MLP inner width f (for an MoE layer: each expert's)."""
    mlp: str = "swiglu"
    """"swiglu" (gate and up projections, SiLU, product) or "gelu" (up, GeLU)."""
    norm: str = "rmsnorm"
    """"rmsnorm" (keeps 1/rms per row) or "layernorm" (keeps the mean and 1/std per row)."""
    dropout: bool = False
    """Dropout after attention, after the MLP and on the attention probabilities."""
    rope: bool = True
    """Rotary position embeddings on q and k (keep nothing per token: see distlab.models.layers.RoPE)."""
    experts: int = 0
    """Routed experts E of an MoE layer; 0 for a dense MLP."""
    top_k: int = 0
    """Experts per token k (MoE only)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3): the compressed key/value width r_kv; 0 for GQA/MHA."""
    q_lora_rank: int = 0
    """MLA: the compressed query width r_q (0: queries projected directly, as DeepSeek-V2-Lite)."""
    qk_nope_head_dim: int = 0
    """MLA: a head's query/key width without rotary embedding."""
    qk_rope_head_dim: int = 0
    """MLA: a head's rotary query/key width (the rotary key is shared by every head)."""
    v_head_dim: int = 0
    """MLA: a head's value width."""

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "kv_heads", "ffn"):
            if getattr(self, name) <= 0:
                raise ValueError(f"block: {name} must be positive, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"block: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"block: heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if self.mlp not in MLPS:
            raise ValueError(f"block: mlp must be swiglu or gelu, not {self.mlp!r}")
        if self.norm not in NORMS:
            raise ValueError(f"block: norm must be rmsnorm or layernorm, not {self.norm!r}")
        if self.experts < 0 or (self.experts and not 1 <= self.top_k <= self.experts):
            raise ValueError(f"block: top_k must be between 1 and experts ({self.experts}), got {self.top_k}")
        if self.mla:
            dims = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
            if any(getattr(self, d) <= 0 for d in dims) or self.q_lora_rank < 0 or self.kv_heads != self.heads:
                raise ValueError("block: MLA needs positive head widths and kv_heads = heads (every head decompressed)")
            if self.qk_rope_head_dim % 2:
                raise ValueError(f"block: RoPE needs an even rotary width, got {self.qk_rope_head_dim}")
        elif self.rope and self.head_dim % 2:
            raise ValueError(f"block: RoPE needs an even head dimension, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.experts > 0


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    name: str = "custom"
    """Display name."""
    layers: int
    """Transformer blocks L."""
    hidden: int
    """Model width h."""
    heads: int
    """Attention heads a."""
    kv_heads: int | None = None
    """Key/value heads (grouped-query attention); default = heads."""
    ffn: int
    """MLP inner width (the dense layers' MLP in an MoE model)."""
    vocab: int
    """Vocabulary size V."""
    seq: int = 4096
    """Training sequence length s (for a GPT-style model also its learned positions)."""
    mlp: str = "swiglu"
    """"swiglu" (three matrices, Llama) or "gelu" (two matrices and biases, GPT)."""
    tie_embeddings: bool = False
    """Whether the output projection shares the token embedding."""
    norm: str | None = None
    """"rmsnorm" or "layernorm"; default the family's (rmsnorm for swiglu, layernorm for gelu)."""
    dropout: bool | None = None
    """Whether it trains with dropout; default the family's (no for swiglu, yes for gelu)."""
    experts: int = 0
    """Routed experts per MoE layer (0: a dense model)."""
    top_k: int = 0
    """Routed experts per token."""
    moe_ffn: int | None = None
    """One routed expert's inner width; default ffn."""
    shared_experts: int = 0
    """Always-active experts per MoE layer (DeepSeek); their activations are not modelled (must be 0 here)."""
    dense_layers: int = 0
    """Leading layers with a dense MLP instead of an MoE."""
    head_dim: int = 0
    """Width of one attention head; 0 (the default): hidden / heads, as Llama and GPT. Qwen3 and Gemma set it
    apart (Qwen3-30B-A3B: 128 with hidden / heads = 64): the queries are heads x head_dim wide, not hidden."""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "seq"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model {self.name}: {name} must be positive, got {getattr(self, name)}")
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int) or self.head_dim < 0:
            raise ValueError(f"model {self.name}: head_dim must be a positive integer, got {self.head_dim!r}")
        if not self.head_dim and self.hidden % self.heads:
            raise ValueError(f"model {self.name}: hidden {self.hidden} is not divisible by heads {self.heads}")
        if not self.head_dim:  # frozen: the derived default is stored once, so equal shapes compare equal
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.kv_heads is not None and self.kv_heads <= 0:
            raise ValueError(f"model {self.name}: kv_heads must be positive, got {self.kv_heads}")
        if self.heads % self.kv:
            raise ValueError(f"model {self.name}: heads {self.heads} is not divisible by kv_heads {self.kv}")
        if self.mlp not in MLPS:
            raise ValueError(f"model {self.name}: mlp must be swiglu or gelu, not {self.mlp!r}")
        if self.norm is not None and self.norm not in NORMS:
            raise ValueError(f"model {self.name}: norm must be rmsnorm or layernorm, not {self.norm!r}")
        if self.experts < 0 or (self.experts and not 1 <= self.top_k <= self.experts):
            raise ValueError(f"model {self.name}: top_k must be between 1 and experts, got {self.top_k}")
        if self.experts and self.mlp != "swiglu":
            raise ValueError(f"model {self.name}: experts are SwiGLU MLPs here (mlp must be swiglu)")
        if self.shared_experts:
            raise ValueError(f"model {self.name}: shared experts are not modelled")
        if not 0 <= self.dense_layers <= self.layers:
            raise ValueError(f"model {self.name}: dense_layers must be between 0 and layers")
        if self.moe_ffn is not None and self.moe_ffn <= 0:
            raise ValueError(f"model {self.name}: moe_ffn must be positive, got {self.moe_ffn}")

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def q_width(self) -> int:
        """The queries' (and the attention output's) width: heads x head_dim (= hidden unless head_dim is set)."""
        return self.heads * self.head_dim

    @property
    def norm_kind(self) -> str:
        return self.norm or ("rmsnorm" if self.mlp == "swiglu" else "layernorm")

    @property
    def trains_with_dropout(self) -> bool:
        return self.dropout if self.dropout is not None else self.mlp == "gelu"

    @property
    def rope(self) -> bool:
        """Llama-family models rotate q and k; GPT-family models learn absolute positions instead."""
        return self.mlp == "swiglu"

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    def block(self, *, moe: bool | None = None) -> BlockShape:
        """The architecture of one layer: an MoE layer for an MoE model (moe=False: its dense layers)."""
        moe = self.experts > 0 if moe is None else moe
        if moe and not self.experts:
            raise ValueError(f"model {self.name} has no MoE layers")
        return BlockShape(
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv,
            ffn=self.expert_ffn if moe else self.ffn,
            mlp=self.mlp,
            norm=self.norm_kind,
            dropout=self.trains_with_dropout,
            rope=self.rope,
            experts=self.experts if moe else 0,
            top_k=self.top_k if moe else 0,
        )

    def _attention_params(self) -> int:
        h, q, kv_width = self.hidden, self.q_width, self.kv * self.head_dim
        if self.mlp == "swiglu":  # Llama: no biases
            return 2 * h * q + 2 * h * kv_width
        return 2 * h * q + 2 * h * kv_width + (q + 2 * kv_width) + h  # GPT: q, k, v and output biases

    def _norm_params(self) -> int:
        return self.hidden if self.norm_kind == "rmsnorm" else 2 * self.hidden

    def _mlp_params(self, width: int) -> int:
        h = self.hidden
        return 3 * h * width if self.mlp == "swiglu" else 2 * h * width + width + h

    def params_per_layer(self, *, moe: bool = False) -> int:
        """One dense layer's parameters (moe=True: one MoE layer's: the router and every expert)."""
        mlp = self.hidden * self.experts + self.experts * self._mlp_params(self.expert_ffn) if moe else None
        return self._attention_params() + (mlp if moe else self._mlp_params(self.ffn)) + 2 * self._norm_params()

    def params(self) -> int:
        """Exact parameter count: blocks, token embedding, (untied) output head, final norm (and learned
        positions for GPT)."""
        h = self.hidden
        blocks = (self.layers - self.moe_layers) * self.params_per_layer()
        blocks += self.moe_layers * self.params_per_layer(moe=True) if self.experts else 0
        embed = self.vocab * h + (0 if self.rope else self.seq * h)
        head = 0 if self.tie_embeddings else self.vocab * h
        return blocks + embed + head + self._norm_params()

    def active_params(self) -> int:
        """Parameters one token passes through: every MoE layer counts its router and top_k experts only."""
        if not self.experts:
            return self.params()
        idle = (self.experts - self.top_k) * self._mlp_params(self.expert_ffn)
        return self.params() - self.moe_layers * idle


def _shape(row: dict) -> ModelShape:
    return ModelShape(**{k: v for k, v in row.items() if k not in NOT_SHAPE})


def preset(name: str) -> ModelShape:
    known = entries("models")
    if name not in known:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(known)}")
    return _shape(known[name])


def presets() -> dict[str, ModelShape]:
    """The chapters' presets (models.toml): Llama 2, Llama 3.2 1B and GPT-3."""
    return {name: preset(name) for name in entries("models")}


def catalog() -> dict[str, ModelShape]:
    """Every model a shape can describe: the presets, Llama 3.1 and the mixture-of-experts models without
    multi-head latent attention (DeepSeek-V3's MLA and shared experts are not modelled, so it is left out)."""
    allowed = {f.name for f in fields(ModelShape)} | set(NOT_SHAPE)
    out = {}
    for data in DATA_FILES:
        for name, row in entries(data).items():
            if set(row) <= allowed and not row.get("shared_experts"):
                out[name] = _shape(row)
    return out


def named(name: str) -> ModelShape:
    """A model of the catalog by its key ("70B", "Llama-3.1-8B", "Mixtral-8x7B")."""
    known = catalog()
    if name not in known:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(known)}")
    return known[name]


def published_params(name: str) -> int | None:
    """The parameter count the model's checkpoint reports, where a data file records it (for checks only)."""
    for data in DATA_FILES:
        row = entries(data).get(name)
        if row is not None:
            return row.get("params_published")
    return None


def from_json(path: str | Path) -> ModelShape:
    """A model from a JSON file with layers, hidden, heads, kv_heads, ffn, vocab, seq (and optionally
    name, mlp, tie_embeddings, norm, dropout, experts, top_k, moe_ffn, dense_layers)."""
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read model file {path}: {exc}") from None
    allowed = {f.name for f in fields(ModelShape)}
    unknown = set(obj) - allowed
    if unknown:
        raise ValueError(f"model file {path}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    try:
        return ModelShape(**obj)
    except TypeError as exc:
        raise ValueError(f"model file {path}: {exc}") from None
