"""A plan's memory drawn phase by phase (chapter 14): what one GPU holds in forward, in backward and in the optimizer
step, against the usable memory and the headroom rule. The peak of the three is what has to fit, and the bar shows
which phase sets it and what fills it.

The data is the planner's own `MemoryBreakdown.by_phase()` for the plan. This module only groups and draws."""

from __future__ import annotations

from distlab.core.drawing import BLUE, GREEN, GREY, INK, ORANGE, PHONE_WIDTH_IN, VERMILLION, phone_style
from distlab.core.formatting import format_quantity

GROUPS = {  # by_phase's categories, in five colours a phone can tell apart
    "weights": ("weights", "gather buffers", "autocast weight cache"),
    "optimizer": ("optimizer",),
    "gradients": ("gradients", "gradient buckets"),
    "activations": ("activations", "logits", "logits and their gradients", "recompute working set"),
    "temporaries": ("step temporaries",),
}
COLORS = {"weights": BLUE, "optimizer": GREEN, "gradients": ORANGE, "activations": VERMILLION, "temporaries": GREY}
PHASE_LABELS = {"forward": "forward", "backward": "backward", "optimizer_step": "optimizer"}


def grouped(by_phase: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each phase's bytes in the five groups (a category the map does not know is an error, not a silent drop)."""
    out = {}
    for phase, cats in by_phase.items():
        unknown = set(cats) - {"total"} - {c for names in GROUPS.values() for c in names}
        if unknown:
            raise ValueError(f"phase {phase}: categories with no group: {sorted(unknown)}")
        out[phase] = {g: sum(cats.get(c, 0.0) for c in names) for g, names in GROUPS.items()}
    return out


def draw_phases(by_phase: dict[str, dict[str, float]], usable_bytes: float, min_headroom: float, gpu: str):
    """One bar per phase (segments' gid "seg:<phase>:<group>"), the usable memory dashed, the headroom rule dotted."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    groups = grouped(by_phase)
    shown = [g for g in GROUPS if any(parts[g] for parts in groups.values())]  # a group empty in every phase: no key
    peak = max(groups, key=lambda p: sum(groups[p].values()))
    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 0.62 * len(groups) + 2.4))
        for i, (phase, parts) in enumerate(groups.items()):
            left = 0.0
            for g in shown:
                (bar,) = ax.barh(i, parts[g] / 1e9, left=left, height=0.7, color=COLORS[g], edgecolor="white")
                bar.set_gid(f"seg:{phase}:{g}")
                left += parts[g] / 1e9
            if phase == peak:
                ax.set_title(
                    f"peak, in {PHASE_LABELS.get(phase, phase)}: {format_quantity(left * 1e9, 'B')}", loc="left"
                )
        ax.axvline(usable_bytes / 1e9, color=INK, ls="--", lw=1.4)
        ax.axvline((1 - min_headroom) * usable_bytes / 1e9, color=INK, ls=":", lw=1.4)
        ax.set_yticks(range(len(groups)), [PHASE_LABELS.get(p, p) for p in groups])
        ax.set_ylim(len(groups) - 0.5, -0.5)
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.set_xlim(0, usable_bytes / 1e9 * 1.05)
        ax.set_xlabel(f"GB per {gpu}")
        handles: list = [Patch(facecolor=COLORS[g], label=g) for g in shown]
        handles.append(Line2D([], [], color=INK, ls="--", label=f"usable {format_quantity(usable_bytes, 'B')}"))
        handles.append(Line2D([], [], color=INK, ls=":", label=f"{min_headroom:.0%} headroom"))
        fig.legend(handles=handles, loc="lower center", ncol=2, frameon=False, handlelength=1.2, columnspacing=1.0)
        fig.tight_layout(rect=(0, 0.24, 1, 1))
    return fig
