"""Model-state bytes per parameter: the conventions every memory estimate starts from.

Mixed precision (the ZeRO paper's convention, Rajbhandari et al. 2020, Section 3.1): bf16 weights and
gradients for forward and backward, an fp32 master copy that the optimizer updates, and fp32 Adam
moments m and v: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter. Plain fp32 AdamW: 4 + 4 + 4 + 4 = 16.
Pure Python: the calculators and the planner import it without torch.
"""

from __future__ import annotations

from distlab.core.results import Result

# Bytes per parameter that persist across steps, by category, in each convention. "mixed" is the default of
# every page that budgets memory (the ZeRO paper's 16 bytes). Where gradients are reduced and kept in fp32
# (chapter 4: reductions accumulate in fp32), two conventions cost more:
# - "mixed-fp32-grads": Megatron-LM's main_grad, an fp32 gradient buffer in place of the bf16 one (18 B);
# - "mixed-fp32-accum": bf16 gradients plus an fp32 accumulation buffer beside them (20 B), as frameworks
#   that accumulate micro-batches in fp32 keep them.
BYTES_PER_PARAM = {
    "mixed": {
        "weights (bf16)": 2,
        "gradients (bf16)": 2,
        "master weights (fp32)": 4,
        "Adam m (fp32)": 4,
        "Adam v (fp32)": 4,
    },
    "mixed-fp32-grads": {
        "weights (bf16)": 2,
        "gradients (fp32 main_grad)": 4,
        "master weights (fp32)": 4,
        "Adam m (fp32)": 4,
        "Adam v (fp32)": 4,
    },
    "mixed-fp32-accum": {
        "weights (bf16)": 2,
        "gradients (bf16)": 2,
        "gradients (fp32 accumulation)": 4,
        "master weights (fp32)": 4,
        "Adam m (fp32)": 4,
        "Adam v (fp32)": 4,
    },
    "fp32": {"weights (fp32)": 4, "gradients (fp32)": 4, "Adam m (fp32)": 4, "Adam v (fp32)": 4},
}
DEFAULT_PRECISION = "mixed"
MEASURED_PRECISIONS = ("mixed", "fp32")  # the conventions chapter 1 measures on a real AdamW step


STEP_COUNTER_BYTES = 4  # AdamW keeps one 0-d fp32 `step` tensor per parameter tensor, not per parameter


def model_state_bytes(params: int, precision: str = "mixed") -> dict[str, int]:
    """Persistent bytes by category for `params` parameters (step counters excluded: they scale with
    the number of tensors, a few KB for any real model)."""
    if precision not in BYTES_PER_PARAM:
        raise ValueError(f"precision must be one of {', '.join(BYTES_PER_PARAM)}, not {precision!r}")
    return {cat: b * params for cat, b in BYTES_PER_PARAM[precision].items()}


def bytes_per_param(precision: str = DEFAULT_PRECISION) -> int:
    """16 (mixed, fp32), 18 (Megatron's fp32 main_grad), 20 (fp32 gradient accumulation)."""
    return sum(model_state_bytes(1, precision).values())


def checkpoint_bytes_per_param(precision: str = DEFAULT_PRECISION) -> int:
    """What a training checkpoint saves per parameter: every persistent category but the gradients, which the next
    step recomputes (14 in mixed precision, 12 in fp32)."""
    return sum(b for cat, b in BYTES_PER_PARAM[precision].items() if not cat.startswith("gradients"))


ZERO_PAPER_K = 12
"""The ZeRO paper's K for mixed-precision Adam (Rajbhandari et al. 2020, Section 3.1): fp32 master weights, m and v
are K = 12 bytes per parameter beside the 2 + 2 of fp16 weights and gradients, '16Ψ bytes' in all."""


def add_state_bytes(r: Result) -> None:
    """The bytes per parameter a page quotes when it budgets memory: `bytes_per_param` (the default, 16),
    `bytes_per_param_fp32_grads` (Megatron's main_grad, 18), `bytes_per_param_fp32_accum` (20),
    `weights_grads_bytes_per_param` (bf16 weights and gradients, what ZeRO-1 leaves unsharded, 4),
    `checkpoint_bytes_per_param` (everything but the gradients, 14) and `optimizer_bytes_per_param` (12). Each is
    claimed against the ZeRO paper's 2 + 2 + K, plus the fp32 gradient bytes its convention names, so a typo in
    BYTES_PER_PARAM fails every page that quotes one."""
    mixed = BYTES_PER_PARAM["mixed"]
    values = {
        "bytes_per_param": (bytes_per_param("mixed"), 2 + 2 + ZERO_PAPER_K, "2 + 2 + K", "mixed-precision AdamW"),
        "bytes_per_param_fp32_grads": (
            bytes_per_param("mixed-fp32-grads"),
            2 + 4 + ZERO_PAPER_K,
            "2 + 4 + K",
            "with Megatron's fp32 main_grad in place of bf16 gradients",
        ),
        "bytes_per_param_fp32_accum": (
            bytes_per_param("mixed-fp32-accum"),
            2 + 2 + 4 + ZERO_PAPER_K,
            "2 + 2 + 4 + K",
            "with an fp32 accumulation buffer beside bf16 gradients",
        ),
        "weights_grads_bytes_per_param": (
            mixed["weights (bf16)"] + mixed["gradients (bf16)"],
            2 + 2,
            "2 + 2",
            "bf16 weights and gradients",
        ),
        "checkpoint_bytes_per_param": (
            checkpoint_bytes_per_param("mixed"),
            2 + ZERO_PAPER_K,
            "2 + K",
            "what a checkpoint saves (no gradients)",
        ),
        "optimizer_bytes_per_param": (
            mixed["master weights (fp32)"] + mixed["Adam m (fp32)"] + mixed["Adam v (fp32)"],
            ZERO_PAPER_K,
            "K",
            "fp32 master weights, m and v",
        ),
    }
    for name, (got, paper, expression, what) in values.items():
        r.add(name, got, "B", f"model state per parameter: {what}")
        r.claim(
            f"{what}: bytes per parameter = the ZeRO paper's {expression} (K = {ZERO_PAPER_K})",
            got,
            paper,
            unit="B",
            formula="Rajbhandari et al. 2020, Section 3.1",
        )
