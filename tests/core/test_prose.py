"""Issue 30 item 3: numbers in a page's prose at the precision they deserve, applied by the placeholder."""

import pytest

from distlab.core.formatting import prose
from distlab.core.results import Result
from distlab.core.site import Page


@pytest.mark.parametrize(
    ("value", "unit", "spec", "expected"),
    [
        (55.65, "s", "", "55.6 s"),  # the planner's estimate: three figures, not 55.65
        (0.0007059, "fraction", "", "0.0706 %"),  # not 0.07059 %
        (107_814_649_856, "B", "", "108 GB"),
        (107_814_649_856, "B", "GiB", "100 GiB"),
        (6_738_415_616, "params", "value", "6,738,415,616"),  # an exact count stays exact
        (1_234_560.0, "tokens", "", "1,234,560 tokens"),  # an integral float is a count too
        (97, "", "", "97"),
        (3.14159, "", "value", "3.14"),
        (0.0123, "s", "", "12.3 ms"),
        (3.0e-5, "s", "", "30 µs"),
        (5.0e-7, "", "", "5.00e-07"),
        (2.3456, "x", ".2f", "2.35 x"),  # an explicit format spec is the page's choice
        (1.1203e12, "B", "~", "1.1 TB"),  # the whiteboard's two figures
        (True, "", "", "yes"),
    ],
)
def test_prose_three_significant_figures_counts_exact(value, unit, spec, expected):
    """Would catch a spurious fourth figure (55.65 s beside a 10 % error band) or a count rounded (6.74e9 params
    where the page means the exact parameter count)."""
    assert prose(value, unit, spec) == expected


def test_placeholders_round_prose_but_tables_and_claims_keep_their_precision():
    """Would catch the rounding applied by hand on one page only, or leaking into a table or a claim's values."""
    r = Result("exp")
    r.add("t", 55.6549, "s")
    r.table("tab", ["seconds"], [[55.6549]])
    r.claim("t is the sum", 55.6549, 55.6549, unit="s")
    page = Page("demo.md")
    page.results["exp"], page.stored["exp"] = r, []
    out = page.render("It takes {{ exp.t }}.\n\n{{ table exp.tab }}\n")
    assert "It takes 55.7 s." in out
    assert "| 55.65 |" in out  # the table at format_number's four figures
    assert "measured 55.65 s, expected 55.65 s" in out  # the claim's full-precision values
