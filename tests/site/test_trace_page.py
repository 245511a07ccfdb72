"""The Trace page (docs/trace.md, assets/trace.js): a reader's trace files, diagnosed in the browser by the same
`distlab trace` as the command line (Pyodide, the Plan page's worker and bundle). The recorded straggler run that the
site ships is fed through the page's file input and the page's report must be the command line's, drawn."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from distlab.core.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [REPO / "docs" / "assets" / "trace" / f"straggler-rank{r}.json.gz" for r in (0, 1)]
STATE = "document.getElementById('distlab-trace').dataset"


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors, external = [], []
    pg.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    def block(route):
        external.append(route.request.url)
        route.abort()

    context.route(lambda url: not url.startswith(server), block)
    pg.goto(server + "trace/", wait_until="domcontentloaded")
    yield pg, errors, external
    context.close()


def cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def wait_done(pg, timeout_s: float = 120) -> str:
    pg.wait_for_function(f"() => ['done', 'refused', 'failed'].includes({STATE}.state)", timeout=timeout_s * 1000)
    return pg.evaluate(f"() => {STATE}.state")


def test_a_recorded_trace_dropped_on_the_page_gives_the_command_lines_report(page):
    """Both ranks' gzipped traces through the file input: the page's report is `distlab trace --json --timeline` on
    the same files (top cause, straggler, every rank's time by cause), the table shows it, and the timeline draws
    every piece of the slowest step. Offline: no request leaves the site. Would catch a page that gunzips wrongly,
    passes the files in another order, or draws a different step than the command reports."""
    pg, errors, external = page
    pg.locator("#distlab-trace input[type=file]").set_input_files([str(p) for p in SAMPLES])
    assert wait_done(pg) == "done", pg.locator("#distlab-trace [data-key=error]").inner_text()
    shown = json.loads(pg.evaluate(f"() => {STATE}.report"))
    rc, out, err = cli(["trace", *map(str, SAMPLES), "--json", "--timeline"])
    assert rc == 0, err
    want = json.loads(out)
    assert shown["top_cause"] == want["top_cause"] == "straggler"
    assert shown["straggler_rank"] == want["straggler_rank"] == 1
    for a, b in zip(shown["ranks"], want["ranks"]):
        assert a["time_by_cause"] == pytest.approx(b["time_by_cause"], rel=1e-12, abs=1e-15)
    assert shown["timeline"]["step"] == want["timeline"]["step"]
    assert pg.locator("#distlab-trace [data-key=top-cause]").inner_text() == "straggler"
    assert pg.locator("#distlab-trace table[data-key=ranks] tbody tr").count() == 2
    rects = pg.locator("#distlab-trace svg[data-key=timeline] rect[data-cause]").count()
    assert rects == len(want["timeline"]["pieces"]) > 0
    assert not errors and not external, (errors, external)


def test_a_file_that_is_not_a_trace_is_refused_in_one_line(page, tmp_path):
    """A text file that is neither a trace nor an NCCL log: the page shows the command's one-line refusal and no
    report. Would catch a page that swallows the error or shows a stale report."""
    pg, errors, external = page
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, not a trace\n")
    pg.locator("#distlab-trace input[type=file]").set_input_files(str(bad))
    assert wait_done(pg) == "refused"
    shown = pg.locator("#distlab-trace [data-key=error]").inner_text()
    assert shown.startswith("distlab trace: notes.txt:") and "\n" not in shown.strip(), shown
    assert not errors and not external, (errors, external)
