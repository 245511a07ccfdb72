"""Issue 30: a chapter read in one sitting. Its results to remember on the first screen, its lesson short enough,
its tables readable on a phone. Measured on the built site (scripts/reading_stats.py prints the numbers)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("reading_stats", REPO / "scripts" / "reading_stats.py")
reading_stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reading_stats)

CHAPTER = re.compile(r"^\d\d-")
SCREEN = {"width": 1440, "height": 900}


def _chapters(site: Path) -> list[str]:
    return [
        p.name
        for p in sorted(site.iterdir())
        if p.is_dir() and CHAPTER.match(p.name) and "Not built: DISTLAB_ONLY" not in (p / "index.html").read_text()
    ]


def test_each_chapters_takeaway_is_on_its_first_screen(built_site, browser, server):
    """Would catch a chapter whose results to remember sit below a long introduction or notation table: the
    takeaway box's title must be inside the first 1440x900 screen, unscrolled."""
    context = browser.new_context(viewport=SCREEN)
    page = context.new_page()
    late = []
    try:
        for name in _chapters(built_site):
            page.goto(server + name + "/", wait_until="load")
            box = page.locator("article .admonition.abstract").first
            if box.count() == 0:
                late.append(f"{name}: no takeaway box")
                continue
            title = box.locator(".admonition-title").bounding_box()
            if title is None or title["y"] + title["height"] > SCREEN["height"]:
                late.append(f"{name}: takeaway title at y = {title and round(title['y'])} px")
    finally:
        context.close()
    assert not late, "takeaway not on the first screen:\n" + "\n".join(late)


def test_reading_lengths_are_measured_and_printed(built_site, capsys):
    """The numbers issue 30 asks to track: words per chapter outside collapsed blocks, whole page, claims per page.
    Would catch a measurement that finds no chapter (a renamed folder) or a claims box the count misses."""
    stats = reading_stats.site_stats(built_site)
    with capsys.disabled():
        print("\n" + reading_stats.report(stats))
    assert stats, "no chapter measured"
    assert all(s["lesson"] > 0 and s["page"] >= s["lesson"] for s in stats.values()), stats
    assert any(s["claims"] > 0 for s in stats.values())


def test_lessons_within_issue_30s_limits(built_site):
    """The lesson outside collapsed blocks at most 5,000 words, the whole page at most 9,000; the failure lists
    every page over a limit with its numbers."""
    over = reading_stats.over_limits(reading_stats.site_stats(built_site))
    assert not over, "\n".join(over)


def test_word_counts_fold_details_blocks():
    """Would catch words inside a collapsed <details> block counted as lesson, or scripts counted as words."""
    html = (
        "<html><body><nav>menu words</nav><article><h1>Title here</h1><p>one two three</p>"
        "<details><summary>Checked on this page: 12 claims</summary><p>four five</p></details>"
        "<script>var x = 1;</script></article></body></html>"
    )
    assert reading_stats.page_stats(html) == {"lesson": 5, "page": 13, "claims": 12}


PHONE = {"width": 390, "height": 844}
_CONTRAST = """() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const background = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c; } return [255, 255, 255]; };
  const worst = [];
  for (const el of document.querySelectorAll('article p, article td, article small, article .admonition-title')) {
    if (!el.offsetParent || !el.textContent.trim()) continue;
    const fg = lum(rgb(getComputedStyle(el).color)), bg = lum(background(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    if (ratio < 4.5) worst.push(el.tagName + ' ' + ratio.toFixed(2) + ': ' + el.textContent.trim().slice(0, 40));
  }
  return worst.slice(0, 5);
}"""


def test_chapters_read_on_a_phone_and_in_dark_mode(built_site, browser, server):
    """Would catch a table or formula that widens the whole page on a 390 px phone (the reader scrolls sideways
    through the prose) instead of scrolling inside its box, and text in dark mode with less than WCAG's 4.5:1
    contrast (a fixed dark grey on slate)."""
    context = browser.new_context(viewport=PHONE, color_scheme="dark")
    page = context.new_page()
    problems = []
    try:
        for name in _chapters(built_site) + [
            p.name for p in sorted(built_site.iterdir()) if p.name.startswith("appendix-")
        ]:
            page.goto(server + name + "/", wait_until="load")
            assert page.evaluate("document.body.getAttribute('data-md-color-scheme')") == "slate", name
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > PHONE["width"]:
                problems.append(f"{name}: the page is {width} px wide on a {PHONE['width']} px phone")
            unscrolled = page.evaluate(
                """() => [...document.querySelectorAll('article table')].filter(t => {
                     for (let el = t; el && el.tagName !== 'ARTICLE'; el = el.parentElement) {
                       const o = getComputedStyle(el).overflowX;
                       if (o === 'auto' || o === 'scroll') return false; }
                     return t.scrollWidth > t.parentElement.clientWidth; }).length"""
            )
            if unscrolled:
                problems.append(f"{name}: {unscrolled} wide tables with no scrolling box")
            low = page.evaluate(_CONTRAST)
            if low:
                problems.append(f"{name}: low contrast in dark mode: {low}")
    finally:
        context.close()
    assert not problems, "\n".join(problems)
