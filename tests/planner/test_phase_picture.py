"""The phase drawing (chapter 14) shows the planner's memory by phase for the recommended plan."""

from __future__ import annotations

import pytest

from distlab.core.drawing import legibility_problems
from distlab.planner.config import usable_bytes
from distlab.planner.phase_picture import draw_phases, grouped
from distlab.planner.search import search
from distlab.planner.worked_plan_7b import finetune


@pytest.fixture(scope="module")
def plan():
    m, c, t = finetune("7B")
    return search(m, c, t)[0], usable_bytes(c.gpu)


def _drawn(fig) -> dict[str, float]:
    out: dict[str, float] = {}
    for patch in fig.axes[0].patches:
        kind, _, rest = (patch.get_gid() or "").partition(":")
        if kind == "seg":
            out[rest.split(":")[0]] = out.get(rest.split(":")[0], 0.0) + patch.get_width() * 1e9
    return out


def test_bars_are_the_phases_added_up_from_the_breakdown(plan):
    """Would catch a drawing that drops a category (the logits' gradients in backward, the gradient buckets in the
    step) or stacks a phase twice: each bar equals the phase's bytes added up here from the breakdown's fields, and
    the longest is the allocator peak the planner fits."""
    best, usable = plan
    m = best.memory
    held = m.weights + m.optimizer + m.gather_buffers + m.autocast_cache
    by_hand = {
        "forward": held + m.gradients_in_forward + m.activations + m.logits,
        "backward": held
        + m.gradients
        + m.grad_buckets
        + m.activations
        + max(m.logits + m.logits_backward, m.recompute_working),
        "optimizer_step": m.weights + m.optimizer + m.gradients + m.grad_buckets + m.step_temporaries,
    }
    fig = draw_phases(m.by_phase(), usable, 0.08, "A100")
    drawn = _drawn(fig)
    assert drawn == pytest.approx(by_hand, rel=1e-12)
    assert max(drawn.values()) == pytest.approx(m.allocator_peak_bytes, rel=1e-12)
    lines = [ln.get_xdata()[0] * 1e9 for ln in fig.axes[0].lines]
    assert lines == pytest.approx([usable, 0.92 * usable], rel=1e-12)


def test_an_unknown_category_is_an_error_not_a_silent_drop():
    """Would catch a new category in the memory model (say, a new buffer) vanishing from the drawing."""
    with pytest.raises(ValueError, match="no group"):
        grouped({"forward": {"weights": 1.0, "a new buffer": 2.0, "total": 3.0}})


def test_the_drawing_reads_on_a_phone_and_in_dark_mode(plan):
    """Would catch type too small for a 390 px phone or a transparent background (dark text on slate)."""
    best, usable = plan
    fig = draw_phases(best.memory.by_phase(), usable, 0.08, "A100")
    fig.canvas.draw()
    assert legibility_problems(fig) == []
