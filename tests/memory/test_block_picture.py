"""The drawing of what one block keeps for backward (chapter 3) shows the hooks' count, legibly on a phone."""

from __future__ import annotations

import pytest

from distlab.core.drawing import legibility_problems
from distlab.memory.activation_memory import measure_block
from distlab.memory.block_picture import SCORES, draw_block


def by_hand(s: int, b: int, h: int, a: int, stat_bytes: int = 2) -> dict[str, int]:
    """Bytes per module written out here from the block's code (bf16, one-byte dropout masks, CPU LayerNorm
    statistics in bf16): Korthikanti et al.'s terms plus the causal mask and the statistics."""
    sbh, sb, att = s * b * h, s * b, a * s * s * b
    norm = 2 * sbh + 2 * sb * stat_bytes
    return {
        "ln1": norm,
        "attn.qkv": 2 * sbh,
        "attn": 4 * sbh + s * s + 2 * att + 2 * att + 2 * sbh,  # Q, K; mask; softmax out; dropped probs; V
        "attn.attn_drop": att,
        "attn.proj": 2 * sbh,
        "attn.resid_drop": sbh,
        "ln2": norm,
        "mlp.up": 2 * sbh,
        "mlp": 8 * sbh,
        "mlp.down": 8 * sbh,
        "mlp.drop": sbh,
    }


@pytest.mark.parametrize(("s", "b", "h", "a"), [(257, 2, 96, 4), (97, 1, 64, 4)])
def test_bars_are_the_bytes_each_module_keeps(s, b, h, a):
    """Would catch a drawing that stopped reflecting the count: a bar per module, in forward order, each the bytes
    written out by hand here, and only the modules holding s x s tensors in the score colour."""
    counted = measure_block(s, b, h, a)["by_module"]
    fig = draw_block(counted, list(counted))
    bars = {p.get_gid()[4:]: p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("bar:")}
    assert list(bars) == list(by_hand(s, b, h, a))
    assert {m: p.get_width() * 1e3 for m, p in bars.items()} == pytest.approx(by_hand(s, b, h, a), rel=1e-12)
    colours = {m: p.get_facecolor() for m, p in bars.items()}
    assert {m for m, c in colours.items() if c == colours["attn"]} == set(SCORES)


def test_the_drawing_reads_on_a_phone_and_in_dark_mode():
    """Would catch type too small for a 390 px phone or a transparent background (dark text on slate)."""
    counted = measure_block(257, 2, 96, 4)["by_module"]
    fig = draw_block(counted, list(counted))
    fig.canvas.draw()
    assert legibility_problems(fig) == []
