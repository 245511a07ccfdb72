"""nccl-tests' printed columns checked against each other: the claims every page that reads a published sweep makes
on it (appendix 09's reading of the sweeps, chapter 9's model against one)."""

from __future__ import annotations

import numpy as np

from distlab.core.results import Result


def check_columns(r: Result, name: str, row: dict) -> None:
    """A printed sweep's columns against each other: each size doubles the one before (nccl-tests' -f 2), algbw =
    S / t within the printed rounding, busbw = algbw x 2(n-1)/n, the Avg line = the mean of busbw. A transcription
    or copy-paste error breaks one of them; a last digit the rounding hides does not (at small sizes algbw prints
    0.00)."""
    sizes = row["bytes"]
    r.claim(
        f"{name}: each size is twice the one before, every row",
        sum(1 for a, b in zip(sizes, sizes[1:]) if b != 2 * a),
        0,
        formula="nccl-tests -b ... -e ... -f 2",
    )
    s = np.array(row["bytes"], dtype=float)
    n = row["ranks"]
    for prefix in ("", "inplace_"):
        if f"{prefix}time_us" not in row:
            continue
        t = np.array(row[f"{prefix}time_us"])
        a = np.array(row[f"{prefix}algbw_gbps"])
        b = np.array(row[f"{prefix}busbw_gbps"])
        exact = s / t / 1e3  # GB/s
        half_digit = 10 ** (np.floor(np.log10(t)) - 3) / 2  # the time is printed with 4 significant digits
        allowed = 0.005 + exact * half_digit / t
        what = "in-place" if prefix else "out-of-place"
        r.claim(
            f"{name}, {what}: algbw = size / time, every row",
            float(np.max(np.abs(a - exact) / allowed)),
            1.0,
            relation="<=",
            formula="|algbw - S/t| over what the printed rounding allows",
        )
        r.claim(
            f"{name}, {what}: busbw = algbw x 2(n-1)/n, every row",
            float(np.max(np.abs(b - a * 2 * (n - 1) / n))),
            0.005 * (1 + 2 * (n - 1) / n),
            relation="<=",
            unit="GB/s",
            formula="both columns printed to 0.01 GB/s",
        )
    if "avg_busbw_gbps" in row and "inplace_busbw_gbps" in row:
        both = row["busbw_gbps"] + row["inplace_busbw_gbps"]
        r.claim(
            f"{name}: 'Avg bus bandwidth' = the mean busbw of every size, out-of-place and in-place",
            float(np.mean(both)),
            row["avg_busbw_gbps"],
            abs_tol=0.0055,
            unit="GB/s",
            formula="nccl-tests averages every measurement it printed",
        )
