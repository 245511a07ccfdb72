"""What an experiment returns: named quantities with units, tables, figures and claims.

A claim is the unit of trust on the site: a measured or simulated value beside what a formula
predicts, with the tolerance it must meet. A failing claim fails the build.
"""

from __future__ import annotations

import io
import math
from dataclasses import asdict, dataclass, field

from distlab.core.formatting import format_number, format_quantity


@dataclass(frozen=True)
class Quantity:
    """A named number with its unit and a one-line meaning."""

    value: float
    unit: str = ""
    description: str = ""

    def __str__(self) -> str:
        return format_quantity(self.value, self.unit)


# The shape of a Result's JSON. Part of every cache key instead of this file's text: bump it when to_json or
# from_json change what a stored result means, and every cached result is measured again.
RESULT_SCHEMA = 2

# "value": a formula, a count or a float64 reference; a failure is a wrong number, never re-measured.
# "timing": depends on a clock on a shared machine; designed with a wide margin from the physics, and
# re-measured on fresh runs (experiments.TIMING_ATTEMPTS) before it may fail the build.
CLAIM_KINDS = ("value", "timing")


@dataclass(frozen=True)
class Claim:
    """`measured <relation> expected` within max(abs_tol, rel_tol * |expected|).

    relation "==" is a two-sided check; "<=" and ">=" are bounds (a ceiling, a floor), for which the
    tolerance is slack in the bound's favour. `kind` says whether noise can move it (see CLAIM_KINDS).
    """

    name: str
    measured: float
    expected: float
    relation: str = "=="
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    unit: str = ""
    formula: str = ""
    kind: str = "value"

    def __post_init__(self) -> None:
        if self.relation not in ("==", "<=", ">="):
            raise ValueError(f"claim {self.name!r}: relation must be ==, <= or >=, not {self.relation!r}")
        if self.kind not in CLAIM_KINDS:
            raise ValueError(f"claim {self.name!r}: kind must be one of {', '.join(CLAIM_KINDS)}, not {self.kind!r}")
        if self.rel_tol < 0 or self.abs_tol < 0:
            raise ValueError(f"claim {self.name!r}: tolerances must be >= 0")

    @property
    def slack(self) -> float:
        return max(self.abs_tol, self.rel_tol * abs(self.expected))

    @property
    def passed(self) -> bool:
        m, e = float(self.measured), float(self.expected)
        if not (math.isfinite(m) and math.isfinite(e)):
            return False
        if self.relation == "==":
            return abs(m - e) <= self.slack
        if self.relation == "<=":
            return m <= e + self.slack
        return m >= e - self.slack

    def tolerance_text(self) -> str:
        if self.rel_tol == 0 and self.abs_tol == 0:
            return "exact"
        parts = []
        if self.rel_tol:
            parts.append(f"{self.rel_tol:.3g} relative")
        if self.abs_tol:
            parts.append(f"{format_quantity(self.abs_tol, self.unit)} absolute")
        return "±" + " or ".join(parts)

    def describe(self) -> str:
        m = format_quantity(_plain(self.measured), self.unit)
        e = format_quantity(_plain(self.expected), self.unit)
        word = {"==": "expected", "<=": "at most", ">=": "at least"}[self.relation]
        return f"measured {m}, {word} {e} (tolerance {self.tolerance_text()})"


def _plain(value):
    """Exact display for claim values: full precision, so a failure message shows the real numbers."""
    if isinstance(value, float) and not value.is_integer():
        return float(f"{value:.6g}")
    return value


ORIGINS = ("measured", "simulated", "computed", "published")  # published: transcribed from a paper, sourced


def _check_origin(kind: str, what: str) -> None:
    if kind and kind not in ORIGINS:
        raise ValueError(f"{what}: kind must be one of {', '.join(ORIGINS)} (or empty for the result's), not {kind!r}")


@dataclass
class Table:
    columns: list[str]
    rows: list[list]
    caption: str = ""
    kind: str = ""
    """How its numbers were made, when not as the result's: a formula-only table inside a measured experiment
    is "computed", so the page stamps it "computed", never "measured on ..."."""

    def to_markdown(self) -> str:
        def cell(v) -> str:
            if isinstance(v, Quantity):
                return str(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return format_number(v)
            return str(v)

        lines = ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in self.rows]
        if self.caption:
            lines += ["", f"*{self.caption}*"]
        return "\n".join(lines)


@dataclass
class Figure:
    png: bytes
    caption: str
    kind: str = ""
    """As Table.kind: a simulated timeline inside a measured experiment is stamped "simulated"."""


@dataclass
class Result:
    """Everything one experiment produced. `kind` says how: measured, simulated or computed."""

    name: str
    kind: str = "measured"
    quantities: dict[str, Quantity] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def add(self, name: str, value: float, unit: str = "", description: str = "") -> float:
        _new(self.quantities, name, f"{self.name}: quantity")
        self.quantities[name] = Quantity(_to_builtin(value), unit, description)
        return value

    def claim(self, name: str, measured, expected, **kwargs) -> Claim:
        _new({c.name: c for c in self.claims}, name, f"{self.name}: claim")
        c = Claim(name, _to_builtin(measured), _to_builtin(expected), **kwargs)
        self.claims.append(c)
        return c

    def table(self, name: str, columns: list[str], rows: list[list], caption: str = "", *, kind: str = "") -> Table:
        """`kind` ("computed", "simulated") when the table's numbers come from formulas or a simulator although
        the experiment measures: the page's stamp follows the numbers' origin, not the experiment's."""
        _new(self.tables, name, f"{self.name}: table")
        _check_origin(kind, f"{self.name}: table {name!r}")
        rows = [[_to_builtin(v) if not isinstance(v, (str, Quantity)) else v for v in row] for row in rows]
        self.tables[name] = Table(columns, rows, caption, kind)
        return self.tables[name]

    def origin(self, what: Table | Figure) -> str:
        """measured, simulated or computed: how a table's or figure's numbers were made."""
        return what.kind or self.kind

    def figure(self, name: str, fig, caption: str, *, kind: str = "") -> None:
        """Store a matplotlib figure as PNG bytes with no timestamp, so rebuilds are byte-stable. `kind` as for
        `table`."""
        import matplotlib.pyplot as plt

        _new(self.figures, name, f"{self.name}: figure")
        _check_origin(kind, f"{self.name}: figure {name!r}")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        self.figures[name] = Figure(buf.getvalue(), caption, kind)

    @property
    def failed_claims(self) -> list[Claim]:
        return [c for c in self.claims if not c.passed]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "quantities": {k: asdict(q) for k, q in self.quantities.items()},
            "tables": {k: asdict(t) for k, t in self.tables.items()},
            "figures": {k: f.caption for k, f in self.figures.items()},
            "figure_kinds": {k: f.kind for k, f in self.figures.items() if f.kind},
            "claims": [asdict(c) | {"passed": c.passed} for c in self.claims],
            "data": self.data,
            "provenance": self.provenance,
        }

    @classmethod
    def from_json(cls, obj: dict, figures: dict[str, bytes]) -> Result:
        def quantity(q):
            return Quantity(**q) if isinstance(q, dict) and set(q) == {"value", "unit", "description"} else q

        tables, kinds = {}, obj.get("figure_kinds", {})
        for k, t in obj["tables"].items():
            rows = [[quantity(v) for v in row] for row in t["rows"]]
            tables[k] = Table(t["columns"], rows, t.get("caption", ""), t.get("kind", ""))
        return cls(
            name=obj["name"],
            kind=obj["kind"],
            quantities={k: Quantity(**q) for k, q in obj["quantities"].items()},
            tables=tables,
            figures={k: Figure(figures[k], cap, kinds.get(k, "")) for k, cap in obj["figures"].items()},
            claims=[Claim(**{k: v for k, v in c.items() if k != "passed"}) for c in obj["claims"]],
            data=obj.get("data", {}),
            provenance=obj.get("provenance", {}),
        )


class DuplicateName(ValueError):
    """One experiment gave two things the same name: a page would silently show only the second."""


def _new(existing: dict, name: str, what: str) -> None:
    if name in existing:
        raise DuplicateName(f"{what} {name!r} added twice (the page would show only the second value)")


def _to_builtin(value):
    """numpy / torch scalars to plain Python numbers so results serialise to JSON."""
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            pass
    return value


def worst_relative_gap(pairs) -> float:
    """Largest |shown - expected| / |expected| over (shown, expected) pairs (|shown| where expected is 0), for a
    claim that many cells equal their references. A NaN anywhere (a cell that is missing) makes it infinite, so the
    claim fails rather than passes (`max` alone skips a NaN that is not first); so does an empty list."""
    gaps = [abs(shown - want) / abs(want) if want else abs(shown) for shown, want in pairs]
    return math.inf if not gaps or any(math.isnan(g) for g in gaps) else max(gaps)
