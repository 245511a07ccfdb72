"""How numbers are written on the site: thousands separators, significant digits, units auto-scaled (GB = 1e9 B
as on datasheets). Presentation only: it is not part of any result's cache key."""

from __future__ import annotations

import math

# Unit prefixes for auto-scaled display. Bytes use powers of 1000 (GB = 1e9 B) throughout the site,
# matching datasheets; the site's conventions page says so.
_SCALED_UNITS = {"B", "B/s", "FLOP", "FLOP/s", "bit/s"}


_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


_BYTE_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")]


def format_number(value: float, sig: int = 4) -> str:
    """Integers with thousands separators, other numbers with `sig` significant digits."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    if value == 0 or not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e6 or abs(value) < 1e-3:
        return f"{value:.{sig - 1}e}"
    text = f"{value:.{sig}g}"
    return text


def format_quantity(value: float, unit: str = "", spec: str = "") -> str:
    """Render a value with its unit: 16 B/param, 112 GB, 41.3 TFLOP/s, 2.5 ms, 37.5 %.

    `spec` overrides: a unit to express the value in ("GB", "GiB", "TFLOP/s", "%", "ms"),
    "value" for the bare number, "~" for a whiteboard figure (two significant figures, see `whiteboard`),
    or a Python format spec (".2f").
    """
    if spec == "~":
        return whiteboard(value, unit)
    if spec == "value":
        return format_number(value)
    if spec:
        fixed = _fixed_unit(spec)
        if fixed is not None:
            factor, label = fixed
            return f"{format_number(round_sig(value / factor, 4))} {label}".strip()
        return format(value, spec) + (f" {unit}" if unit else "")
    if unit == "fraction":
        return f"{format_number(round_sig(100 * value, 3))} %"
    if unit == "s" and value != 0 and abs(value) < 1:
        if abs(value) >= 1e-3:
            return f"{format_number(round_sig(value * 1e3, 3))} ms"
        return f"{format_number(round_sig(value * 1e6, 3))} µs"
    if unit in _SCALED_UNITS and abs(value) >= 1e3:
        prefixes = _BYTE_PREFIXES if unit.startswith("B") else _PREFIXES
        for factor, prefix in prefixes:
            if abs(value) >= factor:
                return f"{format_number(round_sig(value / factor, 3))} {prefix}{unit}"
    return f"{format_number(value if isinstance(value, int) else round_sig(value, 4))} {unit}".strip()


def _fixed_unit(spec: str) -> tuple[float, str] | None:
    binary = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
    if spec in binary:
        return binary[spec], spec
    if spec == "%":
        return 0.01, "%"
    if spec in ("ms", "µs", "us"):
        return (1e-3, "ms") if spec == "ms" else (1e-6, "µs")
    for factor, prefix in _PREFIXES + [(1e3, "K"), (1.0, "")]:
        for base in ("B", "B/s", "FLOP", "FLOP/s"):
            if spec == prefix + base:
                return factor, spec
    return None


def round_sig(value: float, sig: int) -> float:
    if value == 0 or not math.isfinite(value) or isinstance(value, int):
        return value
    return round(value, sig - 1 - int(math.floor(math.log10(abs(value)))))


WHITEBOARD_SIG = 2
"""Significant figures of a whiteboard derivation: what a candidate says out loud (1.1 TB, 3.2x, 16 days)."""


def whiteboard(value: float, unit: str = "") -> str:
    """A number rounded for a whiteboard: two significant figures, the unit scaled as everywhere else
    (`{{ exp.q | ~ }}` on a page). The value is the library's; only its display is rounded, here and nowhere else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return format_quantity(value, unit)
    rounded = round_sig(float(value), WHITEBOARD_SIG)
    if unit == "fraction":
        return f"{format_number(round_sig(100 * value, WHITEBOARD_SIG))} %"
    if unit == "s" and rounded != 0 and abs(rounded) < 1:
        scale, label = (1e3, "ms") if abs(rounded) >= 1e-3 else (1e6, "µs")
        return f"{format_number(round_sig(value * scale, WHITEBOARD_SIG))} {label}"
    if unit in _SCALED_UNITS and abs(rounded) >= 1e3:
        prefixes = _BYTE_PREFIXES if unit.startswith("B") else _PREFIXES
        if abs(rounded) >= 1e4 * prefixes[0][0]:  # beyond the largest prefix: 6.0e23 FLOP, as on a whiteboard
            return f"{value:.{WHITEBOARD_SIG - 1}e} {unit}"
        for factor, prefix in prefixes:
            if abs(rounded) >= factor:
                return f"{format_number(round_sig(value / factor, WHITEBOARD_SIG))} {prefix}{unit}"
    return f"{format_number(rounded)} {unit}".strip()
