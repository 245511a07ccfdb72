"""Dollars: GPU-hours times a price per GPU-hour, the price from a dated list (distlab/data/gpu_prices.toml).

Rental prices move month to month and every row of the list is a third party's reading of a provider's list price,
dated. So a cost is always shown with its assumption: the price, the rows it comes from, their dates and their range.
The default price for a GPU is the median of its on-demand rows (an 8-GPU instance's price divided by 8; spot tiers
and market surveys' ranges left out of the median, kept in the range). A caller who knows its contract passes its
own price.

Pure arithmetic on the data file (no torch): `distlab scaling`, chapter 11, the practice pages and the planner's
worked plans call `price()` and `dollars()`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from distlab.core.facts import entries

# gpus.toml names -> the names the price rows use for the same chip (providers print less precise names).
FAMILIES = {
    "A100-SXM-80GB": ("A100-SXM-80GB", "A100-80GB"),
    "H100-SXM": ("H100-SXM", "H100"),
    "H200": ("H200", "H200-SXM"),
}


@dataclass(frozen=True, kw_only=True)
class Price:
    """A price per GPU-hour and what it stands on."""

    gpu: str
    usd_per_gpu_hour: float
    basis: str
    """'median of N on-demand list prices' or 'given'."""
    low: float
    """Lowest price on the list for this GPU (on-demand, spot or a survey's range)."""
    high: float
    """Highest price on the list for this GPU."""
    first_date: str
    last_date: str
    rows: tuple[str, ...] = ()
    """The data-file entries behind the median."""

    def as_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "basis": self.basis,
            "low": self.low,
            "high": self.high,
            "dates": f"{self.first_date} to {self.last_date}",
            "rows": list(self.rows),
            "source": "distlab/data/gpu_prices.toml (secondary, dated: a range, not a quote)",
        }


def rows_for(gpu: str) -> dict[str, dict]:
    """Every price row for `gpu` (a gpus.toml name), keyed by entry name."""
    names = FAMILIES.get(gpu, (gpu,))
    return {k: v for k, v in entries("gpu_prices").items() if v.get("gpu") in names}


def on_demand(row: dict) -> float | None:
    """USD per GPU-hour of an on-demand row (an instance price divided by its GPUs); None for spot or a range."""
    if "spot" in row.get("tier", ""):
        return None
    if "usd_per_gpu_hour" in row:
        return row["usd_per_gpu_hour"]
    if "usd_per_instance_hour" in row:
        return row["usd_per_instance_hour"] / row["gpus"]
    return None


def price(gpu: str, usd_per_gpu_hour: float | None = None) -> Price:
    """The price to assume for `gpu`: the given one, else the median on-demand list price. Raises ValueError when
    the list has no on-demand row for it and none is given."""
    rows = rows_for(gpu)
    values = []
    for r in rows.values():
        values += [
            v for v in (r.get("usd_per_gpu_hour"), r.get("usd_per_gpu_hour_low"), r.get("usd_per_gpu_hour_high"))
        ]
        if "usd_per_instance_hour" in r:
            values.append(r["usd_per_instance_hour"] / r["gpus"])
    values = [v for v in values if v is not None]
    demand = {k: on_demand(r) for k, r in rows.items() if on_demand(r) is not None}
    dates = sorted((str(r["date"]) for r in rows.values()), key=_month)
    if usd_per_gpu_hour is not None:
        if not usd_per_gpu_hour > 0:
            raise ValueError(f"a price must be positive, got {usd_per_gpu_hour}")
        low = min(values, default=usd_per_gpu_hour)
        high = max(values, default=usd_per_gpu_hour)
        return Price(
            gpu=gpu,
            usd_per_gpu_hour=usd_per_gpu_hour,
            basis="given",
            low=low,
            high=high,
            first_date=dates[0] if dates else "",
            last_date=dates[-1] if dates else "",
        )
    if not demand:
        raise ValueError(f"no sourced on-demand price for {gpu}; give one (--price-per-gpu-hour)")
    return Price(
        gpu=gpu,
        usd_per_gpu_hour=statistics.median(demand.values()),
        basis=f"median of {len(demand)} on-demand list prices",
        low=min(values),
        high=max(values),
        first_date=dates[0],
        last_date=dates[-1],
        rows=tuple(sorted(demand)),
    )


def _month(date: str) -> str:
    """'2026-Q1' -> '2026-01', so quarters sort among months and days."""
    year, _, rest = date.partition("-")
    if rest.startswith("Q"):
        return f"{year}-{3 * int(rest[1]) - 2:02d}"
    return date


def dollars(gpu_hours: float, p: Price) -> float:
    """Cost in USD: GPU-hours x price per GPU-hour."""
    if not gpu_hours >= 0:
        raise ValueError(f"gpu_hours must be >= 0, got {gpu_hours}")
    return gpu_hours * p.usd_per_gpu_hour


def add_usd(r, name: str, amount: float, description: str) -> None:
    """r.add for a cost, in a scale a page can print: 460.5 thousand USD, 3.34 million USD."""
    for factor, word in ((1e9, "billion USD"), (1e6, "million USD"), (1e3, "thousand USD")):
        if abs(amount) >= factor:
            r.add(name, amount / factor, word, description)
            return
    r.add(name, amount, "USD", description)


def usd(amount: float) -> str:
    """$1.23 M, $45.6 k, $789: a cost as a page or the CLI prints it (three significant digits)."""
    for factor, word in ((1e9, " B"), (1e6, " M"), (1e3, " k")):
        if abs(amount) >= factor:
            return f"${amount / factor:.3g}{word}"
    return f"${amount:,.0f}" if abs(amount) >= 10 else f"${amount:.2f}"
