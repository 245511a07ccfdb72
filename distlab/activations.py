"""Activation memory of a transformer layer (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", https://arxiv.org/abs/2205.05198, Section 4)."""

from __future__ import annotations


def published_bytes_per_layer(s: int, b: int, h: int, a: int) -> float:
    """sbh(34 + 5as/h): 16-bit activations with dropout, no parallelism, no recompute (Eq. 1)."""
    return s * b * h * (34 + 5 * a * s / h)
