"""The 1F1B drawing (chapter 7) shows the simulator's timeline and its bubble, legibly on a phone."""

from __future__ import annotations

import pytest

from distlab.core.drawing import legibility_problems
from distlab.model_parallel.pipeline import simulate
from distlab.model_parallel.pipeline_picture import draw_pipeline, idle_spans


def _drawn(fig, kind: str, stages: int) -> list[float]:
    widths = [0.0] * stages
    for patch in fig.axes[0].patches:
        k, _, s = (patch.get_gid() or "").partition(":")
        if k == kind:
            widths[int(s)] += patch.get_width()
    return widths


@pytest.mark.parametrize(("p", "m"), [(4, 8), (3, 5), (5, 13)])
def test_idle_boxes_are_the_bubble_and_op_boxes_the_work(p, m):
    """Would catch a drawing that stopped reflecting the simulator: idle boxes that miss a gap (the drain after the
    last backward) or double one, so that the drawn idle time per GPU differs from the fill-and-drain closed form
    (p - 1)(t_f + t_b), or op boxes that do not add up to m forwards and m backwards per GPU."""
    t_f, t_b = 1.0, 2.0
    sim = simulate(p, m, "1f1b", forward=t_f, backward=t_b)
    fig = draw_pipeline(sim)
    assert _drawn(fig, "idle", p) == pytest.approx([(p - 1) * (t_f + t_b)] * p, abs=1e-9)
    assert _drawn(fig, "op", p) == pytest.approx([m * (t_f + t_b)] * p, abs=1e-9)
    title = fig.axes[0].get_title(loc="left")
    assert f"{(p - 1) / (m + p - 1):.0%}" in title


def test_idle_spans_of_an_uneven_pipeline_fill_the_step():
    """Would catch gaps computed from the wrong origin: with a slow last stage, busy plus idle must still be the
    step on every GPU."""
    sim = simulate(3, 4, "1f1b", forward=[1.0, 1.0, 1.7], backward=[2.0, 2.0, 3.1])
    for busy, gaps in zip(sim.busy, idle_spans(sim)):
        assert busy + sum(e - a for a, e in gaps) == pytest.approx(sim.step_time, abs=1e-9)


def test_the_drawing_reads_on_a_phone_and_in_dark_mode():
    """Would catch type too small for a 390 px phone or a transparent background (dark text on slate)."""
    fig = draw_pipeline(simulate(4, 8, "1f1b"))
    fig.canvas.draw()
    assert legibility_problems(fig) == []
