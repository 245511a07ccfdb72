"""Helpers for the practice pages' by-hand claims (issue 26's guard audit): a page's numbers against references
typed out in the page's `*_checks.py` module, never the function that made them called twice.

Two kinds of comparison: `pairs_claim` puts each shown quantity beside its hand-worked value and claims the largest
relative gap is rounding noise; `printed_claim` reads a table's or caption's printed text back and claims every cell
is within half a unit of its last printed digit of the hand-worked value.
"""

from __future__ import annotations

import math
import re

from distlab.core.results import Result

USD_SCALE = {"billion USD": 1e9, "million USD": 1e6, "thousand USD": 1e3, "USD": 1.0}  # gpu_cost.add_usd's units


def gap(pairs: dict[str, tuple[float, float]]) -> tuple[float, str]:
    """Largest relative gap |shown - by hand| / |by hand| over named pairs, and the name that has it."""
    worst, name = 0.0, ""
    for key, (shown, expected) in pairs.items():
        g = abs(shown - expected) / abs(expected) if expected else abs(shown)
        if g >= worst:
            worst, name = g, key
    return worst, name


def pairs_claim(r: Result, name: str, pairs: dict[str, tuple[float, float]], *, formula: str = "") -> None:
    """One claim over many numbers: the largest relative gap between a shown value and its hand-worked reference
    is float rounding (1e-9). A failing claim names its worst pair in its formula."""
    worst, key = gap(pairs)
    formula = f"worst: {key}; {formula}" if worst > 1e-9 else formula
    r.claim(f"{name} (largest relative gap)", worst, 0.0, abs_tol=1e-9, formula=formula)


def number(text: str) -> tuple[float, float]:
    """The first number printed in `text` ('30.8 min', '1.54%', '4,096') and half a unit of its last digit."""
    found = re.search(r"-?[\d,]*\.?\d+", text)
    if found is None:
        raise ValueError(f"no number in {text!r}")
    digits = found.group(0).replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits), 0.5 * 10.0**-decimals


def printed_claim(r: Result, name: str, cells: list[tuple[str, float]]) -> None:
    """Every printed cell within half a unit of its last digit of the hand-worked value (a percent cell is compared
    in percent): the largest |printed - by hand| / half a unit is at most 1."""
    worst = 0.0
    for text, expected in cells:
        shown, half = number(text)
        worst = max(worst, abs(shown - expected) / half)
    r.claim(f"{name}: printed cells = by hand to their last digit", worst, 1.0, relation="<=")


def rounded_claim(r: Result, name: str, pairs: dict[str, tuple[float, float]], figures: int = 2) -> None:
    """Whiteboard numbers: each shown value is its hand-worked exact value rounded to `figures` significant figures,
    i.e. within half a unit of its last figure (so a rounding that moved at all fails)."""
    worst = 0.0
    for shown, exact in pairs.values():
        half = 0.5 * 10.0 ** (math.floor(math.log10(abs(shown))) - figures + 1)
        worst = max(worst, abs(shown - exact) / half)
    r.claim(f"{name}: each = the exact value by hand to {figures} significant figures", worst, 1.0, relation="<=")


def usd(r: Result, key: str) -> float:
    """A cost the page shows (gpu_cost.add_usd scales it to thousand, million or billion USD), in USD."""
    q = r.quantities[key]
    return q.value * USD_SCALE[q.unit]
