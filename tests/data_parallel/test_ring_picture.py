"""The ring drawing (chapter 5) shows the simulator's chunk movements, legibly on a phone."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from distlab.core.drawing import ORANGE, legibility_problems
from distlab.data_parallel.ring_allreduce import _layout_misreads, ring_contributions
from distlab.data_parallel.ring_picture import draw_ring, row_labels, shades


def closed_form_counts(n: int) -> np.ndarray:
    """Hand-derived: in reduce-scatter step s (from 0) GPU r adds chunk (r - 1 - s) mod N from its left neighbour,
    so after k steps GPU r's chunk c sums 1 + d GPUs when d = (r - c) mod N is between 1 and k, else 1; all-gather
    step s hands GPU r the finished chunk (r - s) mod N."""
    out = np.zeros((2 * n - 1, n, n), dtype=int)
    for k in range(n):  # the start and the N - 1 reduce-scatter steps
        for r in range(n):
            for c in range(n):
                d = (r - c) % n
                out[k, r, c] = 1 + d if 1 <= d <= k else 1
    for j in range(1, n):  # all-gather step j
        out[n - 1 + j] = out[n - 2 + j]
        for r in range(n):
            out[n - 1 + j, r, (r - j + 1) % n] = n
    return out


def closed_form_received(n: int) -> np.ndarray:
    rs = [[(r - 1 - s) % n for r in range(n)] for s in range(n - 1)]
    ag = [[(r - s) % n for r in range(n)] for s in range(n - 1)]
    return np.array(rs + ag)


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_the_simulated_chunk_counts_match_the_hand_derived_ring(n):
    """Would catch a ring schedule that sends the wrong chunk (the sums would still be right at the end, the steps
    would not) or a drawing fed from a sketch instead of the simulator: N - 1 reduce-scatter rows, then N - 1
    all-gather rows, each chunk summing the GPUs the textbook says."""
    counts, received = ring_contributions(n)
    assert counts.shape == (2 * n - 1, n, n)
    np.testing.assert_array_equal(counts, closed_form_counts(n))
    np.testing.assert_array_equal(received, closed_form_received(n))


def test_the_drawing_shows_those_counts_and_moves():
    """Would catch a drawing whose shades or outlines stopped following the data (an off-by-one in the shade index,
    the outline on the sent instead of the received chunk, a missing row)."""
    n = 4
    counts, received = ring_contributions(n)
    fig = draw_ring(counts, received)
    colors = [tuple(round(x, 6) for x in c) for c in shades(n)]
    expected, expected_got = closed_form_counts(n), closed_form_received(n)
    cells = [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("cell:")]
    assert len(cells) == (2 * n - 1) * n * n
    for p in cells:
        row, g, c = (int(x) for x in p.get_gid().split(":")[1:])
        face = tuple(round(x, 6) for x in to_rgb(p.get_facecolor()))
        assert colors.index(face) + 1 == expected[row, g, c], p.get_gid()
        outlined = to_rgb(p.get_edgecolor()) == to_rgb(ORANGE)
        assert outlined == (row > 0 and expected_got[row - 1, g] == c), p.get_gid()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == row_labels(n) and sum(x.startswith("RS") for x in labels) == n - 1


def test_the_drawing_reads_on_a_phone_and_in_dark_mode():
    """Would catch type too small for a 390 px phone or a transparent background (dark text on slate)."""
    fig = draw_ring(*ring_contributions(4))
    fig.canvas.draw()
    assert legibility_problems(fig) == []


def test_the_layout_read_back_catches_a_moved_label_or_margin():
    """Would catch a GPU name no longer over its buffer, a legend count off its square or a lopsided frame
    (ring-allreduce's layout claim, which closes the drawing's geometry in the guard audit)."""
    n = 4
    fig = draw_ring(*ring_contributions(n))
    assert _layout_misreads(fig, n) == 0
    ax = fig.axes[0]
    name = next(t for t in ax.texts if t.get_text() == "GPU 1")
    name.set_x(name.get_position()[0] + 0.5)
    assert _layout_misreads(fig, n) == 1
    name.set_x(name.get_position()[0] - 0.5)
    ax.set_xlim(ax.get_xlim()[0], ax.get_xlim()[1] + 1)
    assert _layout_misreads(fig, n) == 1
