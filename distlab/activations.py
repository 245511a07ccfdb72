"""Activation memory of a transformer layer (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", https://arxiv.org/abs/2205.05198, Section 4, Table 2).

Convention of the paper: 16-bit activations, dropout masks at 1 byte per element, s sequence length,
b micro-batch, h hidden size, a attention heads, t tensor-parallel size.
"""

from __future__ import annotations

RECOMPUTE = ("none", "selective", "full")


def published_bytes_per_layer(s: int, b: int, h: int, a: int) -> float:
    """sbh(34 + 5as/h): no parallelism, no recompute (the paper's Eq. 1)."""
    return s * b * h * (34 + 5 * a * s / h)


def activation_bytes_per_layer(seq: int, batch: int, hidden: int, heads: int, *, tp: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes of activations one layer keeps for backward, per GPU (the paper's Table 2).

    none:       sbh(10 + 24/t + 5as/(ht))       (with sequence parallelism: sbh/t (34 + 5as/h))
    selective:  sbh(10 + 24/t)                   (with sequence parallelism: sbh/t * 34)
    full:       2sbh                             (the layer input only; /t with sequence parallelism)
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {recompute!r}")
    for name, v in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads), ("tp", tp)):
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    sbh, t = seq * batch * hidden, tp
    attention_core = 5 * heads * seq / (hidden * t)  # softmax input/output and dropout mask, O(s^2)
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if sequence_parallel:
        return sbh / t * 34 + (sbh * attention_core if recompute == "none" else 0)
    return sbh * (10 + 24 / t) + (sbh * attention_core if recompute == "none" else 0)
