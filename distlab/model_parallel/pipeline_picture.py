"""The 1F1B schedule drawn from the simulator's own ops (chapter 7): one row per GPU, a box per forward and backward,
and the idle time between them (the bubble) drawn as hatched boxes found in the timeline, not assumed.

The data is `pipeline.simulate(p, m, "1f1b")`: its op start and end times. This module only reads and draws them."""

from __future__ import annotations

from distlab.core.drawing import BLUE, GREY, INK, ORANGE, PHONE_WIDTH_IN, phone_style
from distlab.model_parallel.pipeline import B, F, Simulation

KIND_COLORS = {F: BLUE, B: ORANGE}
IDLE_FACE = "#e8e8e8"


def idle_spans(sim: Simulation) -> list[list[tuple[float, float]]]:
    """Per stage, the (start, end) of every stretch with no op running, from the step's start to its end."""
    first = min(min(t["start"]) for t in sim.timeline if t["start"])
    stop = first + sim.step_time
    out = []
    for t in sim.timeline:
        gaps, at = [], first
        for a, e in sorted(zip(t["start"], t["end"])):
            if a > at + 1e-12:
                gaps.append((at, a))
            at = max(at, e)
        if stop > at + 1e-12:
            gaps.append((at, stop))
        out.append(gaps)
    return out


def draw_pipeline(sim: Simulation):
    """Boxes for ops (gid "op:<stage>"), hatched boxes for idle time (gid "idle:<stage>"), the bubble in the title."""
    from matplotlib.patches import Patch, Rectangle

    idle = idle_spans(sim)
    idle_total = sum(e - a for gaps in idle for a, e in gaps)
    bubble = idle_total / (sim.stages * sim.step_time)
    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 0.5 * sim.stages + 1.8))
        for s, t in enumerate(sim.timeline):
            for k, a, e in zip(t["kind"], t["start"], t["end"]):
                ax.add_patch(
                    Rectangle(
                        (a, s - 0.4), e - a, 0.8, facecolor=KIND_COLORS[k], edgecolor="white", lw=0.8, gid=f"op:{s}"
                    )
                )
            for a, e in idle[s]:
                ax.add_patch(
                    Rectangle(
                        (a, s - 0.4),
                        e - a,
                        0.8,
                        facecolor=IDLE_FACE,
                        edgecolor=GREY,
                        hatch="///",
                        lw=0.8,
                        gid=f"idle:{s}",
                    )
                )
        ax.set_xlim(0, sim.step_time)
        ax.set_ylim(sim.stages - 0.5, -0.5)
        ax.set_yticks(range(sim.stages), [f"GPU {s}" for s in range(sim.stages)])
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.set_xlabel("time (one forward = 1)")
        ax.set_title(f"idle (the bubble): {bubble:.0%} of the step", loc="left", color=INK)
        handles = [
            Patch(facecolor=BLUE, label="forward"),
            Patch(facecolor=ORANGE, label="backward"),
            Patch(facecolor=IDLE_FACE, edgecolor=GREY, hatch="///", label="idle"),
        ]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, handlelength=1.2, columnspacing=1.0)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
