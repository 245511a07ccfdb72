"""Interval arithmetic on time ranges: the only maths a trace diagnosis needs.

A trace is a set of busy ranges per resource (a GPU stream's kernels, a thread's operators). "Compute time" is the
length of the union of compute ranges, "exposed communication" the length of communication minus compute, and so
on. Ranges are (start, end) pairs; `union` returns them sorted and disjoint, which the other functions expect.
Pure Python (the browser runs it too).
"""

from __future__ import annotations

from collections.abc import Iterable

Ranges = list[tuple[float, float]]


def union(ranges: Iterable[tuple[float, float]]) -> Ranges:
    """Sorted, disjoint ranges covering exactly the input's points."""
    out: Ranges = []
    for a, b in sorted(ranges):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def length(ranges: Ranges) -> float:
    return sum(b - a for a, b in ranges)


def intersect(x: Ranges, y: Ranges) -> Ranges:
    """Points in both (each input sorted and disjoint): a two-pointer walk, O(len x + len y)."""
    out: Ranges = []
    i = j = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: Ranges, y: Ranges) -> Ranges:
    """Points of x not in y (each sorted and disjoint)."""
    out: Ranges = []
    j = 0
    for a, b in x:
        while j < len(y) and y[j][1] <= a:
            j += 1
        k, start = j, a
        while k < len(y) and y[k][0] < b:
            if y[k][0] > start:
                out.append((start, y[k][0]))
            start = max(start, y[k][1])
            k += 1
        if start < b:
            out.append((start, b))
    return out


def clip(ranges: Ranges, lo: float, hi: float) -> Ranges:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if b > lo and a < hi]


def gaps(ranges: Ranges, lo: float, hi: float) -> Ranges:
    """The parts of [lo, hi] that no range covers."""
    return subtract([(lo, hi)], union(clip(ranges, lo, hi)))
