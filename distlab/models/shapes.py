"""Shapes of real models (Llama-like presets or a JSON file) and their exact parameter counts."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from distlab.core.facts import entries


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
    """MLP inner width."""
    vocab: int
    """Vocabulary size V."""
    seq: int = 4096
    """Training sequence length s."""
    mlp: str = "swiglu"
    """"swiglu" (three matrices, Llama) or "gelu" (two matrices and biases, GPT)."""
    tie_embeddings: bool = False
    """Whether the output projection shares the token embedding."""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "seq"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model {self.name}: {name} must be positive, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"model {self.name}: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv:
            raise ValueError(f"model {self.name}: heads {self.heads} is not divisible by kv_heads {self.kv}")
        if self.mlp not in ("swiglu", "gelu"):
            raise ValueError(f"model {self.name}: mlp must be swiglu or gelu, not {self.mlp!r}")

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def params_per_layer(self) -> int:
        h, f = self.hidden, self.ffn
        kv_width = self.kv * self.head_dim
        if self.mlp == "swiglu":  # Llama: no biases, RMSNorm weight only
            return 2 * h * h + 2 * h * kv_width + 3 * h * f + 2 * h
        # GPT: biases everywhere, LayerNorm weight + bias
        return 2 * h * h + 2 * h * kv_width + (h + 2 * kv_width) + h + 2 * h * f + f + h + 4 * h

    def params(self) -> int:
        """Exact parameter count: blocks, token embedding, (untied) output head, final norm
        (and learned positions for GPT)."""
        h = self.hidden
        embed = self.vocab * h + (self.seq * h if self.mlp == "gelu" else 0)
        head = 0 if self.tie_embeddings else self.vocab * h
        final_norm = h if self.mlp == "swiglu" else 2 * h
        return self.layers * self.params_per_layer() + embed + head + final_norm


def preset(name: str) -> ModelShape:
    known = entries("models")
    if name not in known:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(known)}")
    row = {k: v for k, v in known[name].items() if k not in ("source", "sources")}
    return ModelShape(**row)


def presets() -> dict[str, ModelShape]:
    return {name: preset(name) for name in entries("models")}


def from_json(path: str | Path) -> ModelShape:
    """A model from a JSON file with layers, hidden, heads, kv_heads, ffn, vocab, seq (and optionally
    name, mlp, tie_embeddings)."""
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
