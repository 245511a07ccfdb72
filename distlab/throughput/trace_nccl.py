"""Read what NCCL left behind: an `NCCL_DEBUG=INFO` log and nccl-tests output, for `distlab trace`.

The log lines worth knowing are chapter 9's data (nccl_debug.toml, `log-*` entries: an example line copied from a real
log, the printf format in NCCL's source that prints it, and what a reader concludes): each format becomes a pattern,
so the reader says, for every kind of line it finds, what it means (a fallback to sockets, the transport between two
GPUs, GPUDirect RDMA on or off). nccl-tests' table is read row by row and checked the way chapter 9 reads one: algbw
is size / time, busbw is algbw x the collective's bus factor (distlab.hardware.collectives), and `#wrong` is zero.
Pure Python.
"""

from __future__ import annotations

import re

from distlab.core.facts import entries
from distlab.hardware.collectives import bus_bandwidth_factor

_PRINTF = re.compile(r"%[-0-9.]*(?:l|ll|z)?([sdiuxfgp%])")
COLLECTIVES = {  # nccl-tests binary -> distlab.hardware.collectives op
    "all_reduce": "all-reduce",
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "alltoall": "all-to-all",
    "broadcast": "broadcast",
}
MAX_LOG_LINES = 2_000_000  # a log beyond this is read up to here (NCCL_DEBUG=TRACE can write gigabytes)


def _pattern(fmt: str) -> re.Pattern:
    """A printf format from NCCL's source as a regular expression (%s any text, %d a number)."""
    parts, last = [], 0
    for m in _PRINTF.finditer(fmt):
        parts.append(re.escape(fmt[last : m.start()]))
        parts.append({"s": ".*?", "%": "%"}.get(m.group(1), r"[-0-9a-fx.]+"))
        last = m.end()
    parts.append(re.escape(fmt[last:]))
    return re.compile("".join(parts))


def log_patterns() -> list[tuple[str, re.Pattern, dict]]:
    """(entry name, pattern, entry) for every log line the data file describes."""
    out = []
    for key, e in entries("nccl_debug").items():
        if not key.startswith("log-"):
            continue
        if "format" in e:
            out.append((key, _pattern(e["format"]), e))
        elif "example" in e:  # no format transcribed: the example's message, numbers and <placeholders> generalised
            message = re.escape(e["example"].split("NCCL INFO ", 1)[-1])
            pattern = re.sub(r"<[^>]*>", ".*?", re.sub(r"[0-9]+", "[0-9]+", message))
            out.append((key, re.compile(pattern), e))
    return out


def read_nccl_log(path: str) -> dict:
    """What an NCCL_DEBUG=INFO log says: its NCCL version, each kind of known line (with what it means), warnings."""
    patterns = log_patterns()
    found: dict[str, dict] = {}
    warnings: list[str] = []
    version, lines = None, 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f):
            if n >= MAX_LOG_LINES:
                break
            if "NCCL" not in line:
                continue
            lines += 1
            m = re.search(r"NCCL version ([0-9][0-9.]*[0-9])", line)
            if m and version is None:
                version = m.group(1)
            if "NCCL WARN" in line:
                warnings.append(line.split("NCCL WARN", 1)[1].strip())
            message = line.split("NCCL INFO", 1)[1] if "NCCL INFO" in line else line
            for key, pattern, e in patterns:  # every meaning that applies (a GDRDMA line is also a network channel)
                if pattern.search(message):
                    hit = found.setdefault(
                        key,
                        {"what": key.removeprefix("log-"), "means": e["means"], "example": line.strip(), "count": 0},
                    )
                    hit["count"] += 1
    return {"file": path, "lines": lines, "version": version, "findings": list(found.values()), "warnings": warnings}


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(.*)$")


def read_nccl_tests(path: str) -> dict:
    """nccl-tests' table: rows (bytes, time, algbw, busbw, #wrong, out-of-place and in-place), checked."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read(64 << 20)
    collective = next((op for name, op in COLLECTIVES.items() if f"{name}_perf" in text), None)
    ranks = len(re.findall(r"^#\s+Rank\s+\d+\s+Group", text, flags=re.M)) or None
    rows, problems = [], []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        numbers = m.group(6).split()
        if len(numbers) < 4:
            continue
        try:
            time_us, algbw, busbw, wrong = float(numbers[0]), float(numbers[1]), float(numbers[2]), numbers[3]
        except ValueError:
            continue
        size = int(m.group(1))
        rows.append({"bytes": size, "time_us": time_us, "algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": wrong})
        if time_us > 0 and not _close(algbw, size / time_us / 1e3):
            problems.append(f"{size} B: algbw {algbw} GB/s is not size / time = {size / time_us / 1e3:.2f} GB/s")
        if (
            collective
            and ranks
            and time_us > 0
            and not _close(busbw, size / time_us / 1e3 * bus_bandwidth_factor(collective, ranks))
        ):
            factor = bus_bandwidth_factor(collective, ranks)
            problems.append(f"{size} B: busbw {busbw} is not algbw x {factor:g} ({collective}, {ranks} ranks)")
        if wrong not in ("0", "N/A"):
            problems.append(f"{size} B: {wrong} wrong results (data corruption or a broken link: stop here)")
    if not rows:
        return {
            "file": path,
            "collective": collective,
            "ranks": ranks,
            "rows": [],
            "problems": ["no table rows"],
            "peak_busbw_gbps": 0.0,
            "peak_bytes": 0,
        }
    peak = max(rows, key=lambda r: r["busbw_gbps"])
    return {
        "file": path,
        "collective": collective,
        "ranks": ranks,
        "rows": rows,
        "problems": problems,
        "peak_busbw_gbps": peak["busbw_gbps"],
        "peak_bytes": peak["bytes"],
    }


def _close(printed: float, computed: float) -> bool:
    """nccl-tests prints two decimals: agree to the rounding (0.005) plus 1 % (time is rounded too)."""
    return abs(printed - computed) <= 0.006 + 0.01 * abs(computed)
