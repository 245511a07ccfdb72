"""FlashAttention's tiles drawn from a real run of the tiled forward (chapter 8, experiment flash-attention-tiles).

`flash_attention.tiled_forward` is run on causal float64 inputs with K and V wrapped so that every block it slices
out is written down, in order: the drawing shows the tiles that loop really visited (queries outside, keys inside,
FlashAttention-2's order), numbered in visit order, the ones the causal mask lets it skip, and what sits on chip
while a tile is computed. The run's output is checked against naive attention, so the recorded loop is the one
that computes attention.
"""

from __future__ import annotations

import math
import re

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


def _off(drawn: list[float], expected: list[float]) -> float:
    """Sum of |drawn - expected| over the pairs: 0 when the drawing sits where the hand layout puts it."""
    return sum(abs(a - e) for a, e in zip(drawn, expected, strict=True))


def _read_back(r: Result, fig, on_chip: int) -> None:
    """The drawing against a by-hand layout: tile (i, j) of a T x T grid at (j B, i B), its sides min(B, N - start),
    blue when j <= i and numbered i(i + 1)/2 + j + 1 (row-major over the lower triangle), grey above the diagonal,
    one hatched triangle per diagonal tile, the outline around query block `on_chip`, the axes spanning 0..N."""
    from matplotlib.patches import Polygon, Rectangle

    n, b = SEQ, BLOCK
    t = -(-n // b)
    ax = fig.axes[0]
    side = [min(b, n - k * b) for k in range(t)]
    want = {
        (i, j): ("tile" if j <= i else "skip", (j * b, i * b, side[j], side[i])) for i in range(t) for j in range(t)
    }
    drawn = {}
    for p in ax.patches:
        gid = p.get_gid() or ""
        if isinstance(p, Rectangle) and gid.split(":")[0] in ("tile", "skip"):
            kind, i, j = gid.split(":")
            drawn[int(i), int(j)] = (kind, (p.get_x(), p.get_y(), p.get_width(), p.get_height()))
    r.claim(
        "figure tiles: every tile's colour, position and size against the by-hand grid (tiles wrong)",
        sum(drawn.get(key) != value for key, value in want.items()) + len(set(drawn) - set(want)),
        0,
    )
    numbers = {}
    for text in ax.texts:
        x, y = text.get_position()
        numbers[int(y // b), int(x // b)] = int(text.get_text())
    order = {(i, j): i * (i + 1) // 2 + j + 1 for i in range(t) for j in range(i + 1)}
    r.claim(
        "figure tiles: every blue tile numbered in row-major visit order (numbers wrong)",
        sum(numbers.get(key) != v for key, v in order.items()) + len(set(numbers) - set(order)),
        0,
    )
    hatched = sum(isinstance(p, Polygon) for p in ax.patches)
    r.claim("figure tiles: one hatched (masked) triangle per diagonal tile", hatched, t)
    (box,) = [p for p in ax.patches if p.get_gid() == "on_chip"]
    r.claim(
        f"figure tiles: the outline spans all keys of query block {on_chip + 1}",
        _off([box.get_x(), box.get_y(), box.get_width(), box.get_height()], [0, on_chip * b, n, side[on_chip]]),
        0,
    )
    r.claim("figure tiles: the drawing is square (a T x T grid)", fig.get_figwidth(), fig.get_figheight() - 0.9)
    r.claim("figure tiles: axes span 0..N, queries downwards", _off([*ax.get_xlim(), *ax.get_ylim()], [0, n, n, 0]), 0)


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
    t = -(-SEQ // BLOCK)  # ⌈N / block⌉ by negated floor division
    r.claim("blocks = ⌈N / block⌉", blocks, t)
    r.claim("tiles of the full score matrix = T^2", blocks * blocks, t * t, unit="tiles")
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
    on_chip = 2  # the query block the drawing outlines (the caption names it)
    fig = draw_tiles(tiles, SEQ, BLOCK, on_chip)
    _read_back(r, fig, on_chip)
    r.figure(
        "tiles",
        fig,
        f"FlashAttention's tiles, recorded from the tiled forward on N = {SEQ} causal tokens in blocks of {BLOCK}: "
        f"each blue tile of S = QKᵀ is computed on chip and thrown away, numbered in the order the loop ran it; "
        f"the grey tiles lie wholly above the diagonal and are never computed. While query block {on_chip + 1} "
        "(outlined) runs, SRAM holds its Q block, its running max m, sum l and output accumulator acc, and one "
        "K and V block at a time; S and P never reach HBM",
    )
    (box,) = [p for p in fig.axes[0].patches if p.get_gid() == "on_chip"]
    named = re.search(r"While query block (\d+) \(outlined\)", r.figures["tiles"].caption)
    r.claim(
        "the caption names the block the drawing outlines (its lower edge / block, counted from 1)",
        int(named[1]) if named else 0,
        math.ceil((box.get_y() + box.get_height()) / BLOCK),
    )
    return r
