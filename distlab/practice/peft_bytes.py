"""Bytes per parameter of the cheaper ways to fine-tune (practice 1's follow-ups): 8-bit Adam, LoRA on a bf16 base,
QLoRA on a 4-bit NormalFloat base. A small formula module on distlab/data/peft_bytes.toml, deliberately simple (the
model state only; activations are chapter 3's and do not change); the planner's own PEFT memory model may replace
it. Pure Python.
"""

from __future__ import annotations

from distlab.core.facts import value
from distlab.memory.model_states import bytes_per_param
from distlab.models.shapes import ModelShape

LORA_RANK = 16  # a scenario input: a common rank; QLoRA's paper reports rank matters less than adapting every layer


def nf4_bits_per_param(double_quant: bool = True) -> float:
    """4-bit weights plus their block constants: 32/64 bits per parameter, or with double quantization
    8/64 + 32/(64 x 256) (QLoRA, section 3)."""
    bits, block = value("peft_bytes.nf4.weight_bits"), value("peft_bytes.nf4.block")
    if not double_quant:
        return bits + value("peft_bytes.nf4.const_bits") / block
    return (
        bits
        + value("peft_bytes.nf4.dq_const_bits") / block
        + value("peft_bytes.nf4.dq_second_bits") / (block * value("peft_bytes.nf4.dq_block"))
    )


def adam8bit_bytes_per_param() -> float:
    """Mixed precision with Adam's two states in 8 bits: bf16 weights and gradients, fp32 master weights, and
    2 x (8 bits + a 32-bit constant per 2048 values)."""
    states = value("peft_bytes.adam-8bit.states")
    per_state = (
        value("peft_bytes.adam-8bit.state_bits")
        + value("peft_bytes.adam-8bit.const_bits") / value("peft_bytes.adam-8bit.block")
    ) / 8
    return 2 + 2 + 4 + states * per_state


def lora_params(m: ModelShape, rank: int = LORA_RANK) -> int:
    """Trainable parameters of LoRA on every linear layer of every block: r(d + k) per d x k matrix."""
    head = m.hidden // m.heads
    kv = m.kv * head
    shapes = [(m.hidden, m.hidden), (m.hidden, kv), (m.hidden, kv), (m.hidden, m.hidden)]
    shapes += [(m.hidden, m.ffn)] * (3 if m.mlp == "swiglu" else 2)  # gate, up, down (or up, down)
    return m.layers * sum(rank * (d + k) for d, k in shapes)


def state_bytes(m: ModelShape, method: str, rank: int = LORA_RANK) -> float:
    """Model state of a fine-tune of m (weights, gradients, optimizer), all GPUs together."""
    n = m.params()
    if method == "full":
        return bytes_per_param() * n
    if method == "full-adam8bit":
        return adam8bit_bytes_per_param() * n
    adapters = bytes_per_param() * lora_params(m, rank)  # trained in mixed precision like any weight
    if method == "lora":
        return 2 * n + adapters  # the frozen bf16 base: no gradients, no optimizer state
    if method == "qlora":
        return nf4_bits_per_param() / 8 * n + adapters
    raise ValueError(f"method must be full, full-adam8bit, lora or qlora, not {method!r}")
