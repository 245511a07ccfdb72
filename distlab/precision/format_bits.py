"""The bit layouts of the training formats drawn from torch (chapter 4, experiment format-bits): one row of boxes per
format, sign, exponent and mantissa bits, the widths read from `torch.finfo` (bits, and the mantissa from epsilon =
2^-m) and checked against the layouts `number_formats.FORMATS` types by hand. tf32 has no torch dtype (a tensor-core
mode): its row comes from its layout and is the one row not read from torch.
"""

from __future__ import annotations

import math

import torch

from distlab.core.drawing import BLUE, GREY, INK, ORANGE, PHONE_WIDTH_IN, phone_style
from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.precision.number_formats import FORMATS, Format

FIELD_COLORS = {"sign": GREY, "exponent": BLUE, "mantissa": ORANGE}


def fields_from_torch(fmt: Format) -> dict[str, int]:
    """Sign, exponent and mantissa widths as torch reports the dtype: bits from finfo, m from eps = 2^-m."""
    if fmt.dtype is None:
        return {"sign": 1, "exponent": fmt.exponent_bits, "mantissa": fmt.mantissa_bits}
    fi = torch.finfo(fmt.dtype)
    mantissa = round(-math.log2(fi.eps))
    return {"sign": 1, "exponent": fi.bits - 1 - mantissa, "mantissa": mantissa}


def draw_bits(rows: list[tuple[str, dict[str, int]]]):
    """One row per format, one box per bit (gid "bit:<row>:<field>"), the total at the right."""
    from matplotlib.patches import Patch, Rectangle

    width = max(sum(f.values()) for _, f in rows)
    with phone_style() as plt:
        fig, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 0.5 * len(rows) + 1.6))
        for i, (_, fields) in enumerate(rows):
            x = 0
            for field, n in fields.items():
                for _ in range(n):
                    ax.add_patch(
                        Rectangle(
                            (x, i - 0.35),
                            1,
                            0.7,
                            facecolor=FIELD_COLORS[field],
                            edgecolor="white",
                            lw=0.6,
                            gid=f"bit:{i}:{field}",
                        )
                    )
                    x += 1
            ax.text(width + 0.8, i, str(x), va="center", gid=f"total:{i}")
        ax.set_xlim(0, width + 4)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_yticks(range(len(rows)), [name for name, _ in rows])
        ax.tick_params(axis="y", length=0)
        ax.set_xticks([])
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        handles = [Patch(facecolor=c, label=f) for f, c in FIELD_COLORS.items()]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, handlelength=1.2, columnspacing=1.0)
        fig.text(0.97, 0.93, "bits", ha="right", color=INK)
        fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    return fig


def _misplaced(fig, rows: list[tuple[str, dict[str, int]]]) -> int:
    """Artists off the places the layouts give them, read back from the figure: a box that is not bit k of its row
    (x = k, 1 wide, its field in sign-exponent-mantissa order, centred on its row's tick, less than a row apart
    tall), a total that is not the row's bit count or not right of every box, a box or total outside the axes'
    limits, limits that are not the rows' bands (half a row's spacing beyond the first and last)."""
    ax = fig.axes[0]
    ticks = list(ax.get_yticks())
    spacing = ticks[1] - ticks[0]
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    boxes: dict[int, list] = {}
    for patch in ax.patches:
        kind, i, field = (patch.get_gid() or "::").split(":")
        if kind == "bit":
            boxes.setdefault(int(i), []).append(
                (patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height(), field)
            )
    totals = {t.get_gid(): t for t in ax.texts}
    right = max(x + w for row in boxes.values() for x, _, w, _, _ in row)
    bad = int((y0, y1) != (ticks[0] - spacing / 2, ticks[-1] + spacing / 2))
    for i, (_, fields) in enumerate(rows):
        order = [field for field, n in fields.items() for _ in range(n)]
        row = sorted(boxes.get(i, []))
        bad += abs(len(row) - len(order))
        for k, ((x, y, w, h, field), want) in enumerate(zip(row, order)):
            bad += (x, w, field) != (k, 1, want) or not math.isclose(y + h / 2, ticks[i]) or not h < spacing
            bad += not (x0 <= x and x + w <= x1 and y0 <= y and y + h <= y1)
        total = totals.get(f"total:{i}")
        bad += total is None or total.get_text() != str(len(order)) or not right < total.get_position()[0] < x1
    return bad


def _collisions(fig) -> int:
    """What a reader would see tangled, on the rendered figure: a text overlapping another text or a bit box, a text
    or the axes reaching outside the figure, the legend overlapping the axes."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax, legend = fig.axes[0], fig.legends[0]
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    extents = [t.get_window_extent(renderer) for t in texts]
    boxes = [p.get_window_extent(renderer) for p in ax.patches if (p.get_gid() or "").startswith("bit:")]
    frame = fig.bbox
    bad = sum(a.overlaps(b) for i, a in enumerate(extents) for b in extents[i + 1 :])
    bad += sum(e.overlaps(b) for e in extents for b in boxes)
    inside = [*extents, ax.get_window_extent(renderer), legend.get_window_extent(renderer)]
    bad += sum(not (frame.x0 <= e.x0 and e.x1 <= frame.x1 and frame.y0 <= e.y0 and e.y1 <= frame.y1) for e in inside)
    return bad + int(legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)))


@experiment("format-bits", "the training formats' bit layouts, read from torch.finfo and drawn")
def format_bits(device: str) -> Result:
    r = Result("format-bits")
    rows = [(f.name, fields_from_torch(f)) for f in FORMATS]
    torch_fields = {f.name: fields for f, (_, fields) in zip(FORMATS, rows) if f.dtype is not None}
    tf32 = dict(rows)["tf32"]
    fp32_sign = torch.empty(0, dtype=torch.float32).element_size() * 8 - sum(
        torch_fields["fp32"][k] for k in ("exponent", "mantissa")
    )
    r.claim(
        "tf32 drawn with fp32's sign and exponent bits, fp16's mantissa bits, from torch (NVIDIA's definition)",
        tf32["sign"] * 10000 + tf32["exponent"] * 100 + tf32["mantissa"],
        fp32_sign * 10000 + torch_fields["fp32"]["exponent"] * 100 + torch_fields["fp16"]["mantissa"],
        formula="10000 s + 100 e + m; s = bits - e - m",
    )
    for f, (_, fields) in zip(FORMATS, rows):
        if f.dtype is None:
            continue
        r.claim(
            f"{f.name}: exponent and mantissa bits from torch.finfo = the typed layout",
            fields["exponent"] * 100 + fields["mantissa"],
            f.exponent_bits * 100 + f.mantissa_bits,
            formula="100 e + m; m = -log2(eps), e = bits - 1 - m",
        )
    fig = draw_bits(rows)
    drawn = {}
    for patch in fig.axes[0].patches:
        kind, i, _ = (patch.get_gid() or "::").split(":")
        if kind == "bit":
            drawn[int(i)] = drawn.get(int(i), 0) + 1
    storage = [(i, f) for i, f in enumerate(FORMATS) if f.dtype is not None]
    r.claim(
        "drawing: boxes per storage format = torch's bits per element (element_size x 8)",
        sum(abs(drawn[i] - torch.empty(0, dtype=f.dtype).element_size() * 8) for i, f in storage),
        0,
        unit="bits",
    )
    r.claim(
        "drawing read back: boxes, totals, axes limits off their places",
        _misplaced(fig, rows),
        0,
        formula="box k of row i: x = k, 1 wide, on row i's tick",
    )
    r.claim("drawing rendered: texts overlapping a text or a box, or outside the figure", _collisions(fig), 0)
    r.figure(
        "layouts",
        fig,
        "The formats' bits, from torch: one sign bit, exponent bits (range), mantissa bits (precision); bf16 keeps "
        "fp32's exponent and drops mantissa, fp16 splits the difference, tf32 (a tensor-core mode, not a storage "
        "type) pairs fp32's exponent with fp16's mantissa",
    )
    return r
