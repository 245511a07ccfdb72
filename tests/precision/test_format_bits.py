"""The bit-layout drawing (chapter 4) shows torch's formats, legibly on a phone."""

from __future__ import annotations

import torch

from distlab.core.drawing import legibility_problems
from distlab.precision.format_bits import _collisions, _misplaced, draw_bits, fields_from_torch
from distlab.precision.number_formats import FORMATS

# IEEE 754-2008 binary32 / binary16, Google's bfloat16, OCP FP8 (E4M3, E5M2): (exponent, mantissa), typed here.
PUBLISHED = {"fp32": (8, 23), "fp16": (5, 10), "bf16": (8, 7), "fp8 e4m3": (4, 3), "fp8 e5m2": (5, 2)}


def test_fields_read_from_torch_are_the_published_layouts():
    """Would catch a wrong eps-to-mantissa conversion (log of eps/2, an off-by-one) or a format typed wrong in
    number_formats: torch's widths must equal the standards' for every storage format."""
    got = {f.name: fields_from_torch(f) for f in FORMATS if f.dtype is not None}
    assert {k: (v["exponent"], v["mantissa"]) for k, v in got.items()} == PUBLISHED
    for f in FORMATS:
        if f.dtype is not None:
            assert sum(fields_from_torch(f).values()) == torch.empty(0, dtype=f.dtype).element_size() * 8


def test_the_drawing_has_one_box_per_bit_in_field_order():
    """Would catch a drawing that stopped following the data: a row whose box count or field order (sign, then
    exponent, then mantissa, left to right) differs from the format's, or a printed total that is not the row's."""
    rows = [(f.name, fields_from_torch(f)) for f in FORMATS]
    fig = draw_bits(rows)
    ax = fig.axes[0]
    by_row: dict[int, list[tuple[float, str]]] = {}
    for p in ax.patches:
        kind, i, field = (p.get_gid() or "::").split(":")
        if kind == "bit":
            by_row.setdefault(int(i), []).append((p.get_x(), field))
    for i, (_, fields) in enumerate(rows):
        order = [field for _, field in sorted(by_row[i])]
        assert order == ["sign"] + ["exponent"] * fields["exponent"] + ["mantissa"] * fields["mantissa"]
    totals = {t.get_gid(): t.get_text() for t in ax.texts}
    assert [totals[f"total:{i}"] for i in range(len(rows))] == [str(sum(f.values())) for _, f in rows]


def test_the_drawing_reads_on_a_phone_and_in_dark_mode():
    """Would catch type too small for a 390 px phone or a transparent background (dark text on slate)."""
    fig = draw_bits([(f.name, fields_from_torch(f)) for f in FORMATS])
    fig.canvas.draw()
    assert legibility_problems(fig) == []


def test_the_read_back_checks_catch_a_moved_box_and_a_stray_label():
    """Would catch claims that cannot fail: a box shifted off its bit, a box too tall for its row, a total moved into
    the boxes (it overlaps them) or off the figure must each count."""
    rows = [(f.name, fields_from_torch(f)) for f in FORMATS]
    fig = draw_bits(rows)
    assert (_misplaced(fig, rows), _collisions(fig)) == (0, 0)
    box = next(p for p in fig.axes[0].patches if p.get_gid() == "bit:0:mantissa")
    box.set_x(box.get_x() + 1)
    assert _misplaced(fig, rows) >= 1
    box.set_x(box.get_x() - 1)
    box.set_height(1.4)
    assert _misplaced(fig, rows) >= 1
    box.set_height(0.7)
    total = next(t for t in fig.axes[0].texts if t.get_gid() == "total:0")
    total.set_x(10)
    assert _misplaced(fig, rows) >= 1 and _collisions(fig) >= 1
    total.set_x(200)
    assert _collisions(fig) >= 1
