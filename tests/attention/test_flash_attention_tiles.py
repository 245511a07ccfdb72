"""The FlashAttention tile drawing (chapter 8) shows the tiles the tiled forward really computes."""

from __future__ import annotations

import math

import pytest

from distlab.attention.flash_attention_tiles import draw_tiles, recorded_tiles
from distlab.core.drawing import legibility_problems


def expected_tiles(n: int, block: int, causal: bool):
    """Written here from the algorithm: query blocks in order; for each, key blocks from 0 up to the last one
    that holds a key at or before the block's last query (all of them without the mask)."""
    out = []
    for i0 in range(0, n, block):
        i1 = min(i0 + block, n)
        for j0 in range(0, i1 if causal else n, block):
            out.append(((i0, i1), (j0, min(j0 + block, n))))
    return out


@pytest.mark.parametrize(("n", "block", "causal"), [(300, 64, True), (97, 32, True), (257, 64, False), (100, 48, True)])
def test_recorded_tiles_are_the_loops_and_the_run_is_exact(n, block, causal):
    """Would catch a recorder that misses a block (a row boundary taken from the wrong slice) or a drawing fed a
    tiling other than the one that computed attention: the recorded tiles are the loop's, T(T + 1)/2 of them
    with the causal mask, and the recorded run's output equals naive float64 attention."""
    tiles, err = recorded_tiles(n, 16, block, causal)
    assert tiles == expected_tiles(n, block, causal)
    t = math.ceil(n / block)
    assert len(tiles) == (t * (t + 1) // 2 if causal else t * t)
    assert err < 1e-12


def test_the_drawing_numbers_the_visited_tiles_and_greys_the_rest():
    """Would catch a drawing that stopped following the recording: every visited tile blue and numbered in visit
    order, every tile wholly above the diagonal grey, none both."""
    n, block = 300, 64
    tiles, _ = recorded_tiles(n, 16, block)
    fig = draw_tiles(tiles, n, block, on_chip_row=2)
    ax = fig.axes[0]
    drawn = {}
    for p in ax.patches:
        kind, *ij = (p.get_gid() or "").split(":")
        if kind in ("tile", "skip"):
            drawn[tuple(int(x) for x in ij)] = kind
    t = math.ceil(n / block)
    assert drawn == {(i, j): "tile" if j <= i else "skip" for i in range(t) for j in range(t)}
    numbers = sorted(int(x.get_text()) for x in ax.texts if x.get_text().isdigit())
    assert numbers == list(range(1, len(tiles) + 1))


def test_the_drawing_reads_on_a_phone_and_in_dark_mode():
    """Would catch type too small for a 390 px phone, white numbers on a colour too pale for them, or a
    transparent background (dark text on slate)."""
    tiles, _ = recorded_tiles(300, 16, 64)
    fig = draw_tiles(tiles, 300, 64, on_chip_row=2)
    fig.canvas.draw()
    assert legibility_problems(fig) == []
