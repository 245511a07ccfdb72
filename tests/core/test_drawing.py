"""The phone-legibility check that every mechanism drawing's test relies on."""

from __future__ import annotations

import pytest

from distlab.core.drawing import PHONE_WIDTH_IN, contrast, legibility_problems, phone_scale, phone_style


def test_contrast_matches_wcag_reference_values():
    """Would catch a wrong luminance formula: WCAG gives 21:1 for black on white and 1:1 for equal colours."""
    assert contrast("black", "white") == pytest.approx(21.0)
    assert contrast("#777777", "#777777") == pytest.approx(1.0)


def test_phone_scale_is_the_column_over_the_drawn_width():
    """Would catch a scale that ignores the 110 dpi the site saves at: 4.6 in is 506 px shown in 358 px."""
    with phone_style() as plt:
        fig, _ = plt.subplots(figsize=(PHONE_WIDTH_IN, 2))
    assert phone_scale(fig) == pytest.approx(358 / 506)
    plt.close(fig)


def test_the_check_flags_small_type_low_contrast_and_a_transparent_background():
    """Would catch a check that cannot fail: 7 pt type on a 9 in figure, pale grey text and a transparent
    background are each reported, and a phone-styled figure is not."""
    with phone_style() as plt:
        good, ax = plt.subplots(figsize=(PHONE_WIDTH_IN, 2))
        ax.text(0.5, 0.5, "readable")
        bad, ax = plt.subplots(figsize=(9, 2))
        ax.text(0.1, 0.5, "tiny", fontsize=7)
        ax.text(0.5, 0.5, "pale", color="#cccccc")
        bad.patch.set_alpha(0.0)
    good.canvas.draw()
    bad.canvas.draw()
    assert legibility_problems(good) == []
    problems = " ".join(legibility_problems(bad))
    assert "'tiny'" in problems and "'pale'" in problems and "background" in problems
    plt.close(good)
    plt.close(bad)
