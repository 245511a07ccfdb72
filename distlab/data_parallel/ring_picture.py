"""The ring all-reduce drawn from a run of its schedule (chapter 5): one row per step, one square per chunk of each
GPU's buffer, shaded by how many GPUs' gradients the chunk sums, the chunk each GPU just received outlined.

The data is `ring_allreduce.ring_contributions(N)`: the simulator's buffers, not a sketch. This module only draws."""

from __future__ import annotations

from distlab.core.drawing import BLUE, INK, ORANGE, PHONE_WIDTH_IN, phone_style

GAP = 0.7  # blank chunk-widths between two GPUs' buffers
SHADE_LIGHTEST = (0.87, 0.93, 0.97)  # a chunk holding one GPU's gradient
SHADE_DARKEST = BLUE  # a chunk summed over all N GPUs


def shades(ranks: int) -> list[tuple[float, float, float]]:
    """N colours from light to the site's blue: index k - 1 for a chunk summing k GPUs."""
    from matplotlib.colors import to_rgb

    a, b = SHADE_LIGHTEST, to_rgb(SHADE_DARKEST)
    return [tuple(x + (y - x) * k / (ranks - 1) for x, y in zip(a, b)) for k in range(ranks)]


def row_labels(ranks: int) -> list[str]:
    """'start', then the N - 1 reduce-scatter steps, then the N - 1 all-gather steps."""
    return ["start"] + [f"RS {s}" for s in range(1, ranks)] + [f"AG {s}" for s in range(1, ranks)]


def draw_ring(counts, received):
    """counts (2N - 1, N, N): GPUs summed per (step, GPU, chunk); received (2N - 2, N): chunk received per step."""
    from matplotlib.patches import Rectangle

    states, ranks, _ = counts.shape
    colors = shades(ranks)
    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 0.42 * states + 1.5))
        for row in range(states):
            for g in range(ranks):
                for c in range(ranks):
                    x = g * (ranks + GAP) + c
                    got = row > 0 and received[row - 1][g] == c
                    ax.add_patch(
                        Rectangle(
                            (x + 0.06, row + 0.08),
                            0.88,
                            0.84,
                            facecolor=colors[counts[row][g][c] - 1],
                            edgecolor=ORANGE if got else INK,
                            linewidth=3.0 if got else 0.6,
                            gid=f"cell:{row}:{g}:{c}",
                            zorder=3 if got else 2,
                        )
                    )
        width = ranks * ranks + (ranks - 1) * GAP
        for g in range(ranks):
            ax.text(g * (ranks + GAP) + ranks / 2, -0.35, f"GPU {g}", ha="center", va="bottom")
        ax.axhline(ranks - 0.0, color=INK, lw=1.2, ls=":")  # between the last RS row and the first AG row
        # The legend, drawn in the same squares: shade = GPUs summed, outline = received this step.
        y = states + 0.7
        for k in range(ranks):
            ax.add_patch(Rectangle((k * 1.1, y), 0.88, 0.84, facecolor=colors[k], edgecolor=INK, lw=0.6))
            ax.text(k * 1.1 + 0.44, y + 1.0, str(k + 1), ha="center", va="top")
        ax.text(ranks * 1.1 + 0.2, y + 0.42, "GPUs summed", va="center")
        ax.add_patch(
            Rectangle((0.06, y + 2.2), 0.88, 0.84, facecolor="white", edgecolor=ORANGE, lw=3.0, gid="legend:received")
        )
        ax.text(1.3, y + 2.62, "chunk received this step", va="center")
        ax.set_xlim(-0.2, width + 0.2)
        ax.set_ylim(y + 3.3, -0.9)
        ax.set_aspect("equal")
        ax.set_yticks([row + 0.5 for row in range(states)], row_labels(ranks))
        ax.tick_params(axis="y", length=0)
        ax.set_xticks([])
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        fig.tight_layout()
    return fig
