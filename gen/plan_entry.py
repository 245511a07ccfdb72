"""The Plan page's way into distlab: `distlab.core.cli.main(argv)`, with standard output and error captured.

gen/assets.py puts this file at the root of the bundle the site serves (assets/plan/distlab.zip, beside the
`distlab` package it needs); the page's worker (docs/assets/plan.js) unpacks the bundle into Pyodide's
in-memory file system, calls `prepare` once and `run` for every request, and tests/site/test_plan_page.py
runs the same two functions under CPython on the same bundle. Nothing here computes: the page's answers are
whatever the command line prints, by construction.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time

SOURCE_MTIME_NS = 1_000_000_000 * 1_000_000_000  # 2001-09-09: one fixed modification time for every source file
"""distlab's source index (distlab/core/sources.py, `sources.json` in its cache folder) is keyed by each file's
modification time and size. The build writes the index for the bundle's files at this time, and `prepare` gives
the unpacked files the same time, so the browser reads the index instead of parsing every module again."""


def prepare(root: str) -> None:
    """Make the unpacked bundle at `root` importable and its caches usable: distlab on sys.path, the source index
    (root/cache) as DISTLAB_CACHE, every source file at SOURCE_MTIME_NS, and root/work as the working folder (the
    page writes a custom model's JSON file there, where `--model model.json` finds it)."""
    os.environ["DISTLAB_CACHE"] = os.path.join(root, "cache")
    for folder, _, names in os.walk(os.path.join(root, "distlab")):
        for name in names:
            if name.endswith(".py"):
                os.utime(os.path.join(folder, name), ns=(SOURCE_MTIME_NS, SOURCE_MTIME_NS))
    if root not in sys.path:
        sys.path.insert(0, root)
    work = os.path.join(root, "work")
    os.makedirs(work, exist_ok=True)
    os.chdir(work)


def run(argv_json: str, files_json: str = "{}") -> str:
    """Run `distlab ARGV` as the command line would and return JSON: rc (the exit status), stdout, stderr and
    seconds (wall time of the command). `files` ({name: text}) are written into the working folder first."""
    from distlab.core.cli import main

    argv = json.loads(argv_json)
    for name, text in json.loads(files_json).items():
        if os.path.basename(name) != name:
            raise ValueError(f"file names only, not paths: {name!r}")
        with open(name, "w", encoding="utf-8") as f:
            f.write(text)
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # --help exits, as argparse does on a terminal
            rc = exc.code if isinstance(exc.code, int) else 0
    seconds = time.perf_counter() - start
    return json.dumps({"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue(), "seconds": seconds})
