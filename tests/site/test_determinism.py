"""Deterministic build: two builds of the same commit give byte-identical pages, figures and assets,
except provenance dates (a build that crosses midnight dates its sitemap and fresh results anew).

The second build reads the experiment cache the first one filled, so it is cheap; the figure test runs
an experiment afresh to show that a cached figure and a new one are the same bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distlab.core import experiments

REPO = Path(__file__).resolve().parents[2]
DATE = re.compile(rb"\b20\d\d-[01]\d-[0-3]\d\b")  # provenance dates (results, sitemap lastmod)


def _files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def _normalised(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":  # the sitemap's gzip header carries the build date as its mtime
        data = gzip.decompress(data)
    return DATE.sub(b"YYYY-MM-DD", data)


def _first_difference(a: Path, b: Path) -> str:
    x, y = _normalised(a), _normalised(b)
    i = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
    return f"byte {i}: {x[max(0, i - 80) : i + 80]!r} vs {y[max(0, i - 80) : i + 80]!r}"


def test_two_builds_of_one_commit_are_byte_identical(built_site, require_same_code, tmp_path):
    """Every file of a second build (pages, figures, search index, calculator data and vectors,
    KaTeX) against the first: identical bytes, or identical once dates are masked. Would catch a PNG
    with a timestamp, a dict or set written in hash order, a random seed that was not fixed, a
    per-build id in a template, or a file one build writes and the other does not."""
    second = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(second)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    require_same_code()
    first_files, second_files = _files(built_site), _files(second)
    assert sorted(first_files) == sorted(second_files), set(first_files) ^ set(second_files)
    differ = [
        rel
        for rel in first_files
        if first_files[rel].read_bytes() != second_files[rel].read_bytes()
        and _normalised(first_files[rel]) != _normalised(second_files[rel])
    ]
    if differ:
        first = _first_difference(first_files[differ[0]], second_files[differ[0]])
        pytest.fail(f"differ beyond dates: {differ[:20]}; {differ[0]} at {first}")
    assert any(rel.endswith(".png") and rel.startswith("figures/") for rel in first_files)
    assert "assets/calculator/vectors.json" in first_files


def test_a_fresh_run_reproduces_the_built_figure_and_numbers(built_site, require_same_code):
    """Chapter 1's experiment run afresh in this process: its figure is byte-identical to the one the
    build took from the cache (made by another process, maybe another day), and its quantities,
    tables and claims are equal. Would catch matplotlib metadata (Software, dates) in the PNG, or an
    unseeded measurement."""
    require_same_code()
    fresh, cached = experiments.run("adamw-bytes", use_cache=False)
    assert not cached
    built = built_site / "figures" / "adamw-bytes--share.png"
    assert built.read_bytes() == fresh.figures["share"].png
    stored, from_cache = experiments.run("adamw-bytes")
    assert from_cache, "the build should have cached adamw-bytes"
    strip = lambda r: {k: v for k, v in r.to_json().items() if k != "provenance"}
    assert strip(fresh) == strip(stored)


# flash-attention-compile (computed) compiles every kernel config for three GPUs (~100 s): left out here to keep the
# suite short; its numbers come from the compiler's output for a pinned triton version (part of its cache key).
SLOW = {"flash-attention-compile"}

_FRESH = """
import hashlib, json, sys
from distlab.core import experiments
out = {}
for name in sys.argv[2:]:
    result, _ = experiments.run(name, use_cache=False)
    obj = {k: v for k, v in result.to_json().items() if k != "provenance"}
    obj["figure_sha256"] = {k: hashlib.sha256(f.png).hexdigest() for k, f in result.figures.items()}
    out[name] = obj
open(sys.argv[1], "w").write(json.dumps(out, sort_keys=True))
"""


def _computed_and_simulated_on_pages() -> list[str]:
    from distlab.core.site import experiments_named

    names: list[str] = []
    for md in sorted((REPO / "docs").rglob("*.md")):
        for name in experiments_named(md.read_text(encoding="utf-8")):
            if name not in names and experiments.spec(name).kind in ("computed", "simulated") and name not in SLOW:
                names.append(name)
    return names


def test_every_computed_and_simulated_result_is_reproduced_by_a_fresh_run(built_site, require_same_code, tmp_path):
    """Every experiment of kind computed or simulated that a page names, run afresh in another interpreter (no
    cache, another hash seed) against what the build showed (its cached result): quantities, tables, claims and
    figure bytes identical. So every computed or simulated page is byte-identical across builds, cache or not.
    Would catch a wall-clock time on a simulated page (chapter 7 once printed its simulator's own seconds), a set
    iterated in hash order, an unseeded random draw, or a date in a figure."""
    names = _computed_and_simulated_on_pages()
    assert len(names) >= 15, names
    out = tmp_path / "fresh.json"
    env = os.environ | {"PYTHONHASHSEED": "12345", "DISTLAB_CACHE": str(tmp_path / "unused-cache")}
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH, str(out), *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    require_same_code()
    fresh = json.loads(out.read_text())
    differ = []
    for name in names:
        built, cached = experiments.run(name)
        assert cached, f"the build should have cached {name}"
        obj = json.loads(json.dumps({k: v for k, v in built.to_json().items() if k != "provenance"}, sort_keys=True))
        obj["figure_sha256"] = {k: hashlib.sha256(f.png).hexdigest() for k, f in built.figures.items()}
        if obj != fresh[name]:
            keys = [k for k in obj if obj[k] != fresh[name].get(k)]
            differ.append(f"{name} ({', '.join(keys)})")
    assert not differ, f"a fresh run differs from the build's result: {differ}"
