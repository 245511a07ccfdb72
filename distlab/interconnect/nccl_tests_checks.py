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


def check_reading(r: Result, row: dict, factor: float, line: float, small: int, large: int, gap: float) -> None:
    """Appendix 09's reading of the 8 x H100 sweep, each figure again from the printed columns by hand: the busbw
    factor as PERFORMANCE.md prints it (`factor`), the latency floor and its span, the peak busbw over the
    NVLink line rate (`line`: 18 links x 25 GB/s) and NCCL's effective rate, the size where busbw first reaches half
    its peak (interpolated in log size between the two printed rows around it), the alpha-beta line's n1/2, the
    slope from `large` bytes up, the rows whose two timings differ by more than `gap`, the excerpt's counts of floats
    (4 bytes each) and its columns as printed. `small`: the top of the latency-bound range the page names."""
    import math

    from distlab.core.facts import value

    effective = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9
    q = r.quantities
    n, sizes = row["ranks"], row["bytes"]
    times = [min(a, b) for a, b in zip(row["time_us"], row["inplace_time_us"])]
    busbw = [max(a, b) * 1e9 for a, b in zip(row["busbw_gbps"], row["inplace_busbw_gbps"])]
    peak, floor = max(busbw), min(times) * 1e-6
    i = next(k for k in range(1, len(sizes)) if busbw[k] >= peak / 2 > busbw[k - 1])
    lo, hi = math.log(sizes[i - 1]), math.log(sizes[i])
    half = math.exp(lo + (peak / 2 - busbw[i - 1]) / (busbw[i] - busbw[i - 1]) * (hi - lo))
    flat = [t for s, t in zip(sizes, times) if s <= small]
    big = [(math.log(s), math.log(t)) for s, t in zip(sizes, times) if s >= large]
    slope = sum((y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in zip(big, big[1:])) / (len(big) - 1)
    ratios = {s: max(a, b) / min(a, b) for s, a, b in zip(sizes, row["time_us"], row["inplace_time_us"])}
    worst = max(ratios, key=ratios.get)
    pairs = [
        (q["ranks"].value, n),
        (q["busbw_factor"].value, factor),
        (q["flat_span"].value, small / sizes[0]),
        (q["floor_s"].value, floor),
        (q["floor_per_step_s"].value, floor / (2 * (n - 1))),
        (q["peak_busbw"].value, peak),
        (q["peak_over_line"].value, peak / line),
        (q["peak_over_effective"].value, peak / effective),
        (q["line_rate"].value, line),
        (q["half_bandwidth_bytes"].value, half),
        (q["avg_busbw"].value, row["avg_busbw_gbps"] * 1e9),
        (q["flat_growth"].value, max(flat) / min(flat)),
        (q["alpha_beta_half_bytes"].value, floor * max(row["algbw_gbps"]) * 1e9),
        (q["large_slope"].value, slope),
        (q["outliers"].value, sum(x > gap for x in ratios.values())),
        (q["worst_outlier_bytes"].value, worst),
        (q["worst_outlier_ratio"].value, ratios[worst]),
    ]
    printed = {s: k for k, s in enumerate(sizes)}
    for cells in r.tables["sweep"].rows:
        s = int(cells[0].replace(",", ""))
        k = printed[s]
        pairs.append((int(cells[1].replace(",", "")), s / 4))
        for col, key in zip((2, 5), ("time_us", "inplace_time_us")):
            pairs.append((float(cells[col]), row[key][k]))
        for col, key in zip((3, 4, 6, 7), ("algbw_gbps", "busbw_gbps", "inplace_algbw_gbps", "inplace_busbw_gbps")):
            pairs.append((float(cells[col]), round(row[key][k], 2)))
    gaps = [abs(a - b) / max(abs(b), 1e-300) for a, b in pairs]
    r.claim(
        "the sweep's reading by hand: factor, floor, peak over the line and effective rates, n1/2, slope, outliers, "
        "the excerpt's rows (worst relative gap)",
        max(gaps),
        0.0,
        abs_tol=1e-9,
        formula="each figure from the printed columns; t = alpha + S/B for the line's n1/2",
    )


def links_bytes_per_s(link: str) -> float:
    """An NVLink generation per direction as its whitepaper counts it: links x the per-link rate each way."""
    from distlab.core.facts import value

    return value(f"interconnect.{link}.links") * value(f"interconnect.{link}.gbytes_per_s_per_link_per_direction") * 1e9


def check_other_sweeps(r: Result, a100: dict, two: dict) -> None:
    """The A100 and 2-node H200 sweeps' figures by hand from their printed columns: the A100's peak busbw over NVLink
    3 as links x per-link rate, NCCL's effective H100 rate over NVLink 4 the same way, the 2-node sweep's last
    doubling (time ratio, and the alpha-beta line through its two largest points as algbw and as busbw x 2(n-1)/n
    from PERFORMANCE.md), and the 'others' table's cells."""
    from distlab.core.facts import value

    effective = value("interconnect.nccl-nvlink4.effective_gbytes_per_s") * 1e9
    q = r.quantities
    a100_line, h100_line = links_bytes_per_s(a100["link"]), links_bytes_per_s("NVLink4-H100")
    a100_peak = max(a100["busbw_gbps"]) * 1e9
    (s1, s2), (t1, t2) = two["bytes"][-2:], [t * 1e-6 for t in two["time_us"][-2:]]
    n = two["ranks"]
    pairs = [
        (q["a100_peak_busbw"].value, a100_peak),
        (q["a100_line_rate"].value, a100_line),
        (q["a100_fraction"].value, a100_peak / a100_line),
        (q["h100_effective_fraction"].value, effective / h100_line),
        (q["two_node_ranks"].value, n),
        (q["two_node_busbw_1g"].value, two["busbw_gbps"][-1] * 1e9),
        (q["two_node_last_ratio"].value, t2 / t1),
        (q["two_node_marginal_algbw"].value, (s2 - s1) / (t2 - t1)),
        (q["two_node_marginal_busbw"].value, (s2 - s1) / (t2 - t1) * 2 * (n - 1) / n),
    ]
    a_row, h_row = r.tables["others"].rows
    pairs += [
        (a_row[1], a100["ranks"]),
        (a_row[2].value, a100_peak),
        (a_row[3].value, a100_line),
        (float(a_row[4].rstrip(" %")), round(100 * a100_peak / a100_line, 1)),
        (h_row[1], n),
        (h_row[2].value, max(two["busbw_gbps"]) * 1e9),
    ]
    r.claim(
        "the A100 and 2-node sweeps' figures and the 'others' table by hand (worst relative gap)",
        max(abs(a - b) / abs(b) for a, b in pairs),
        0.0,
        abs_tol=1e-9,
        formula="busbw / (links x per-link rate); marginal algbw = dS/dt of the last doubling; busbw = algbw 2(n-1)/n",
    )
