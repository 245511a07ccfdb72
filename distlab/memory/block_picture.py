"""What one transformer block keeps for backward, drawn from the saved-tensor hooks' count (chapter 3): one bar per
module in forward order, the attention core's bar (the one with the s x s score terms) in its own colour.

The data is `activation_memory.measure_block(...)["by_module"]`: bytes each module's saved tensors hold, counted
while a real block runs. This module only draws."""

from __future__ import annotations

from distlab.core.drawing import BLUE, PHONE_WIDTH_IN, VERMILLION, phone_style

SCORES = ("attn", "attn.attn_drop")  # the modules whose saved tensors are s x s per head: the quadratic part
LABELS = {
    "ln1": "LayerNorm 1",
    "attn.qkv": "QKV input",
    "attn": "attention core",
    "attn.attn_drop": "score dropout",
    "attn.proj": "proj input",
    "attn.resid_drop": "dropout",
    "ln2": "LayerNorm 2",
    "mlp.up": "MLP up input",
    "mlp": "GeLU input",
    "mlp.down": "MLP down input",
    "mlp.drop": "dropout ",
}


def draw_block(by_module: dict[str, int], order: list[str]):
    """Bars in kB (gid "bar:<module>"), forward order top to bottom; the score-sized modules in vermillion."""
    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 0.36 * len(order) + 1.3))
        for i, module in enumerate(order):
            (bar,) = ax.barh(
                i, by_module.get(module, 0) / 1e3, height=0.72, color=VERMILLION if module in SCORES else BLUE
            )
            bar.set_gid(f"bar:{module}")
        ax.set_yticks(range(len(order)), [LABELS.get(m, m) for m in order])
        ax.set_ylim(len(order) - 0.5, -0.5)
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.set_xlabel("bytes kept for backward (kB)")
        ax.set_title("red: keeps s × s scores", loc="left")
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
    return fig
