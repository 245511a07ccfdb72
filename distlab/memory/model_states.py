"""Model-state bytes per parameter: the conventions every memory estimate starts from.

Mixed precision (the ZeRO paper's convention, Rajbhandari et al. 2020, Section 3.1): bf16 weights and
gradients for forward and backward, an fp32 master copy that the optimizer updates, and fp32 Adam
moments m and v: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter. Plain fp32 AdamW: 4 + 4 + 4 + 4 = 16.
Pure Python: the calculators and the planner import it without torch.
"""

from __future__ import annotations

# Bytes per parameter that persist across steps, by category, in each convention.
BYTES_PER_PARAM = {
    "mixed": {
        "weights (bf16)": 2,
        "gradients (bf16)": 2,
        "master weights (fp32)": 4,
        "Adam m (fp32)": 4,
        "Adam v (fp32)": 4,
    },
    "fp32": {"weights (fp32)": 4, "gradients (fp32)": 4, "Adam m (fp32)": 4, "Adam v (fp32)": 4},
}


STEP_COUNTER_BYTES = 4  # AdamW keeps one 0-d fp32 `step` tensor per parameter tensor, not per parameter


def model_state_bytes(params: int, precision: str = "mixed") -> dict[str, int]:
    """Persistent bytes by category for `params` parameters (step counters excluded: they scale with
    the number of tensors, a few KB for any real model)."""
    if precision not in BYTES_PER_PARAM:
        raise ValueError(f"precision must be one of {', '.join(BYTES_PER_PARAM)}, not {precision!r}")
    return {cat: b * params for cat, b in BYTES_PER_PARAM[precision].items()}
