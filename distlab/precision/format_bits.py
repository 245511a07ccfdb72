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


@experiment("format-bits", "the training formats' bit layouts, read from torch.finfo and drawn")
def format_bits(device: str) -> Result:
    r = Result("format-bits")
    rows = [(f.name, fields_from_torch(f)) for f in FORMATS]
    torch_fields = {f.name: fields for f, (_, fields) in zip(FORMATS, rows) if f.dtype is not None}
    tf32 = dict(rows)["tf32"]
    r.claim(
        "tf32 drawn with fp32's exponent bits and fp16's mantissa bits, both read from torch (NVIDIA's definition)",
        tf32["exponent"] * 100 + tf32["mantissa"],
        torch_fields["fp32"]["exponent"] * 100 + torch_fields["fp16"]["mantissa"],
        formula="100 e + m",
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
    r.figure(
        "layouts",
        fig,
        "The formats' bits, from torch: one sign bit, exponent bits (range), mantissa bits (precision); bf16 keeps "
        "fp32's exponent and drops mantissa, fp16 splits the difference, tf32 (a tensor-core mode, not a storage "
        "type) pairs fp32's exponent with fp16's mantissa",
    )
    return r
