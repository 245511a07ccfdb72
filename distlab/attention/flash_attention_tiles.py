"""FlashAttention's tiles drawn from a real run of the tiled forward (chapter 8, experiment flash-attention-tiles).

`flash_attention.tiled_forward` is run on causal float64 inputs with K and V wrapped so that every block it slices
out is written down, in order: the drawing shows the tiles that loop really visited (queries outside, keys inside,
FlashAttention-2's order), numbered in visit order, the ones the causal mask lets it skip, and what sits on chip
while a tile is computed. The run's output is checked against naive attention, so the recorded loop is the one
that computes attention.
"""

from __future__ import annotations

import math

import torch

from distlab.attention.flash_attention import naive_attention, random_qkv, tiled_forward
from distlab.core.drawing import BLUE, INK, ORANGE, PHONE_WIDTH_IN, phone_style
from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.runtime.threads import one_core

SEQ, HEAD_DIM, BLOCK = 300, 64, 64  # 300 = 4 x 64 + 44: the last block is ragged, as real sequences are


class _Recorder:
    """K or V as the tiled forward sees it: slicing it notes the (first, one-past-last) rows of the block."""

    def __init__(self, tensor: torch.Tensor, log: list[tuple[int, int]]):
        self.tensor, self.log = tensor, log

    def __getitem__(self, index):
        rows = index[2]
        self.log.append((rows.start, rows.stop))
        return self.tensor[index]


def recorded_tiles(n: int, d: int, block: int, causal: bool = True, device: str = "cpu"):
    """Run tiled_forward once and return (tiles, max |O - naive O|): tiles is the list of (query rows, key rows)
    blocks in the order the loop computed them. A query block's inner loop starts again at key 0, which is where a
    new query block begins."""
    q, k, v, _ = random_qkv(1, 1, n, d, torch.float64, device, requires_grad=False)
    keys: list[tuple[int, int]] = []
    values: list[tuple[int, int]] = []
    o, _ = tiled_forward(q, _Recorder(k, keys), _Recorder(v, values), causal, None, block, block)
    if keys != values:
        raise AssertionError("the tiled forward loaded different K and V blocks")
    tiles, row = [], -1
    for j0, j1 in keys:
        row += j0 == 0
        tiles.append(((row * block, min(row * block + block, n)), (j0, j1)))
    err = (o - naive_attention(q, k, v, causal)).abs().max().item()
    return tiles, err


def draw_tiles(tiles, n: int, block: int, on_chip_row: int):
    """The N x N score matrix S to scale: visited tiles numbered in visit order (gid "tile:<i>:<j>"), skipped
    ones grey (gid "skip:<i>:<j>"), the causal mask's masked triangle inside diagonal tiles hatched, and the
    query block `on_chip_row` outlined with what is in SRAM while its tiles run."""
    from matplotlib.patches import Polygon, Rectangle

    starts = list(range(0, n, block))
    visited = {(qi[0] // block, kj[0] // block): order for order, (qi, kj) in enumerate(tiles, 1)}
    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, PHONE_WIDTH_IN + 0.9))
        for i, i0 in enumerate(starts):
            i1 = min(i0 + block, n)
            for j, j0 in enumerate(starts):
                j1 = min(j0 + block, n)
                seen = (i, j) in visited
                ax.add_patch(
                    Rectangle(
                        (j0, i0),
                        j1 - j0,
                        i1 - i0,
                        facecolor=BLUE if seen else "#eeeeee",
                        edgecolor="white",
                        lw=2,
                        gid=f"{'tile' if seen else 'skip'}:{i}:{j}",
                    )
                )
                if seen and j0 < i1 and j1 > i0:  # a diagonal tile: the mask hides keys after the query
                    ax.add_patch(
                        Polygon(
                            [(j0, i0), (j1, i0), (j1, i1)],
                            closed=True,
                            facecolor="#cfe3f3",
                            edgecolor="white",
                            hatch="//",
                            lw=0,
                        )
                    )
                if seen:
                    x, y = ((j0 + j1) / 2, (i0 + i1) / 2) if j != i else (j0 + 0.3 * (j1 - j0), i0 + 0.72 * (i1 - i0))
                    ax.text(x, y, str(visited[i, j]), ha="center", va="center", color="white", gid=f"on:{BLUE}")
        r0, r1 = starts[on_chip_row], min(starts[on_chip_row] + block, n)
        ax.add_patch(Rectangle((0, r0), n, r1 - r0, fill=False, edgecolor=ORANGE, lw=3.5, gid="on_chip"))
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_aspect("equal")
        ax.xaxis.set_label_position("top")
        ax.set_xlabel("keys: K, V blocks")
        ax.set_ylabel("queries: Q blocks")
        ax.set_xticks([])
        ax.set_yticks([])
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        fig.text(0.03, 0.085, "orange: on chip while its tiles run:", color=INK)
        fig.text(0.03, 0.035, "Q block, m, l, acc + one K, V block", color=INK)
        fig.text(0.03, 0.135, "grey: skipped; hatched: masked (causal)", color=INK)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


@experiment(
    "flash-attention-tiles",
    "the tiles FlashAttention's tiled forward visits, recorded from a real causal run, and drawn",
)
def flash_attention_tiles(device: str) -> Result:
    r = Result("flash-attention-tiles")
    with one_core(device):
        tiles, err = recorded_tiles(SEQ, HEAD_DIM, BLOCK, True, device)
    blocks = math.ceil(SEQ / BLOCK)
    r.add("seq", SEQ, "tokens", "sequence length of the drawing's run")
    r.add("block", BLOCK, "", "query and key block size of the run")
    r.add("blocks", blocks, "", "query blocks = key blocks = ceil(N / block)")
    r.add("tiles_computed", len(tiles), "tiles", "tiles the causal loop computed")
    r.add("tiles_total", blocks * blocks, "tiles", "tiles of the full N x N score matrix")
    r.claim("the recorded run computes attention: max |O - naive O| (float64, causal)", err, 0, abs_tol=1e-12)
    r.claim(
        "tiles computed with the causal mask = T(T + 1)/2, T = ceil(N / block)",
        len(tiles),
        blocks * (blocks + 1) // 2,
        unit="tiles",
        formula="the lower triangle of a T x T grid of blocks, diagonal included",
    )
    out_of_order, previous = 0, ((-1, -1), (0, 0))
    for qi, kj in tiles:  # each query block once, in order; inside it, key blocks 0, 1, 2, ... back to back
        new_row = qi != previous[0]
        out_of_order += (qi[0] < previous[0][0]) or kj[0] != (0 if new_row else previous[1][1])
        previous = (qi, kj)
    r.claim("visit order: query blocks outside, in order; key blocks from 0, back to back, inside", out_of_order, 0)
    on_chip = 2
    r.figure(
        "tiles",
        draw_tiles(tiles, SEQ, BLOCK, on_chip),
        f"FlashAttention's tiles, recorded from the tiled forward on N = {SEQ} causal tokens in blocks of {BLOCK}: "
        f"each blue tile of S = QKᵀ is computed on chip and thrown away, numbered in the order the loop ran it; "
        f"the grey tiles lie wholly above the diagonal and are never computed. While query block {on_chip + 1} "
        "(outlined) runs, SRAM holds its Q block, its running max m, sum l and output accumulator acc, and one "
        "K and V block at a time; S and P never reach HBM",
    )
    return r
