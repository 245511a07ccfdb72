"""Drawings of a chapter's mechanism (a ring step, ZeRO's shards, a 1F1B timeline, FlashAttention's tiles) that a
reader looks at on a phone: one narrow figure, large type, few labels, on an opaque white card.

Why these numbers. `Result.figure` saves PNGs at 110 dpi; Material shows an image at most as wide as the text column,
which on a 390 px phone is 390 - 2 x 16 px of padding = 358 px. A figure PHONE_WIDTH_IN wide is drawn
4.6 x 110 = 506 px and shown at 358/506 = 0.71 of that, so FONT_PT = 13 pt (19.9 px drawn) reads as 14 px, above
the 11 px floor `legibility_problems` enforces. Dark mode: like every figure on the site the drawing keeps matplotlib's
opaque white background, so it reads the same in both themes (a white card on slate); its text is near-black, its
colours the Okabe-Ito colour-blind-safe set, each with at least 3:1 contrast against white where it fills a shape
that carries meaning.
"""

from __future__ import annotations

from contextlib import contextmanager

DPI = 110  # Result.figure's dpi
PHONE_PX = 390
PHONE_COLUMN_PX = PHONE_PX - 2 * 16  # Material's 0.8 rem side padding at a 20 px root font
PHONE_WIDTH_IN = 4.6
FONT_PT = 13
MIN_PHONE_PX = 11.0  # the smallest text a drawing may show on the phone
INK = "#111111"
PAPER = "#ffffff"
# Okabe & Ito (2008), "Color Universal Design": distinguishable with the common colour-vision deficiencies.
BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, GREY = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#999999",
)


@contextmanager
def phone_style():
    """matplotlib settings for a phone drawing: large near-black type on white, no top/right spines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context(
        {
            "font.size": FONT_PT,
            "axes.titlesize": FONT_PT,
            "axes.labelsize": FONT_PT,
            "xtick.labelsize": FONT_PT,
            "ytick.labelsize": FONT_PT,
            "legend.fontsize": FONT_PT,
            "text.color": INK,
            "axes.labelcolor": INK,
            "axes.edgecolor": INK,
            "xtick.color": INK,
            "ytick.color": INK,
            "figure.facecolor": PAPER,
            "axes.facecolor": PAPER,
            "savefig.facecolor": PAPER,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "hatch.color": INK,
        }
    ):
        yield plt


def phone_scale(fig) -> float:
    """How much the site shrinks this figure on a 390 px phone (1.0 when it is narrower than the column). The PNG is
    saved with bbox_inches="tight", so its width is that of everything drawn (a long title widens it), not figsize."""
    width_in = fig.get_size_inches()[0]
    renderer = getattr(fig.canvas, "get_renderer", None)
    if renderer is not None:
        width_in = max(width_in, fig.get_tightbbox(renderer()).width)
    return min(1.0, PHONE_COLUMN_PX / (width_in * DPI))


def _luminance(rgb) -> float:
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    """WCAG contrast ratio of two colours (any matplotlib colour spec)."""
    from matplotlib.colors import to_rgb

    la, lb = _luminance(to_rgb(a)), _luminance(to_rgb(b))
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def legibility_problems(fig) -> list[str]:
    """What would make this drawing hard to read on a 390 px phone or in dark mode: text under MIN_PHONE_PX once
    scaled to the phone, text with under 4.5:1 contrast against what it sits on, a background that is not opaque
    (black text would then sit on the dark theme's slate). Text drawn on a coloured box names that box's colour
    in its `gid` as "on:#rrggbb"."""
    from matplotlib.colors import to_rgba

    problems = []
    face = to_rgba(fig.get_facecolor())
    if face[3] < 1.0 or contrast(face, PAPER) > 1.01:
        problems.append(f"background {face} is not opaque white")
    scale = phone_scale(fig)
    for text in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontsize")):
        if not text.get_text().strip() or not text.get_visible():
            continue
        px = text.get_fontsize() / 72 * DPI * scale
        if px < MIN_PHONE_PX:
            problems.append(f"{text.get_text()!r}: {px:.1f} px on a phone (< {MIN_PHONE_PX})")
        gid = text.get_gid() or ""
        under = gid[3:] if gid.startswith("on:") else PAPER
        ratio = contrast(text.get_color(), under)
        if ratio < 4.5:
            problems.append(f"{text.get_text()!r}: contrast {ratio:.2f} on {under} (< 4.5)")
    return problems
