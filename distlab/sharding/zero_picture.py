"""ZeRO's shards drawn from the memory model (chapter 6): one bar per stage, the bytes one GPU keeps of each model
state, hatched where the stage shards that state 1/N per GPU, the GPU's memory as a dashed line.

The data is `zero.model_state_bytes_per_gpu`: the same per-GPU bytes as the chapter's table. This module only draws."""

from __future__ import annotations

from distlab.core.drawing import BLUE, GREEN, INK, ORANGE, PHONE_WIDTH_IN, phone_style
from distlab.core.formatting import format_quantity

STATE_COLORS = {"params": BLUE, "grads": ORANGE, "optimizer": GREEN}
STATE_LABELS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer"}


def draw_shards(
    rows: list[tuple[str, dict[str, int], set[str]]], capacity_bytes: float, gpus: int, gpu_name: str = "one GPU"
):
    """rows: (stage label, model_state_bytes_per_gpu(...), the states that stage shards). Bars in GB per GPU; each
    segment's gid is "seg:<row>:<state>" (with ":shard" when hatched), each total's "total:<row>"."""
    from matplotlib.patches import Patch

    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 0.62 * len(rows) + 1.9))
        for i, (_, per_gpu, sharded) in enumerate(rows):
            left = 0.0
            for state, color in STATE_COLORS.items():
                width = per_gpu[f"{state}_bytes"] / 1e9
                shard = state in sharded
                (bar,) = ax.barh(
                    i, width, left=left, height=0.7, color=color, edgecolor="white", hatch="//" if shard else None
                )
                bar.set_gid(f"seg:{i}:{state}" + (":shard" if shard else ""))
                left += width
            total = ax.text(left + 2, i, format_quantity(per_gpu["total_bytes"], "B"), va="center")
            total.set_gid(f"total:{i}")
        ax.axvline(capacity_bytes / 1e9, color=INK, ls="--", lw=1.2)
        ax.text(capacity_bytes / 1e9 - 1.5, -0.65, f"{gpu_name}: {format_quantity(capacity_bytes, 'B')}", ha="right")
        ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
        ax.set_ylim(len(rows) - 0.5, -0.9)
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        biggest = max(p["total_bytes"] for _, p, _ in rows)
        ax.set_xlim(0, max(biggest, capacity_bytes) / 1e9 * 1.28)
        ax.set_xlabel("model states per GPU (GB)")
        handles = [Patch(facecolor=c, label=STATE_LABELS[s]) for s, c in STATE_COLORS.items()]
        handles.append(Patch(facecolor="white", edgecolor=INK, hatch="//", label=f"1/{gpus} shard"))
        fig.legend(handles=handles, loc="lower center", ncol=2, frameon=False, handlelength=1.2, columnspacing=1.0)
        fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig
