"""The Plan page (docs/plan.md): distlab's planner running in the reader's browser on Pyodide, checked against the
command line.

The build writes what `distlab plan --json` answers to several requests (assets/plan/vectors.json, gen/plan_page.py).
Here the built site is served on 127.0.0.1 and opened in Debian's chromium (Playwright, as tests/site/
test_browser.py does): each request goes into the page through its address, and the page must show the same plans
in the same order with the same numbers, or the same one-line refusal. Python starts once for all of them (the
page keeps its worker across requests, as it does for a reader). A second, fresh page opens the address the first
one produced after a reader's edits and must reproduce its plan. No request may leave 127.0.0.1.

The page runs CPython 3.14 compiled to WebAssembly; the build runs the venv's CPython. Their floats agree to the
last bit except where an operation rounds differently: CPython 3.12+ sums floats with compensation (sum()), and
the two C libraries' log and pow may differ in the last bit. So numbers are compared to 1e-12 relative (the
largest difference seen is 1e-13), and the printed text exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import urlencode

import pytest

from distlab.core import cli
from distlab.models.shapes import ModelShape, preset

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "screenshots"
REL_TOL = 1e-12
FIRST_PLAN_TARGET_S, REPLAN_TARGET_S = 5.0, 1.0  # the targets (README, "Benchmarks: the Plan page")
SLACK = 2.0  # the bounds asserted: a shared, loaded machine must not fail the suite (the README has the numbers)
STATE = "(document.getElementById('distlab-plan')?.dataset ?? {})"


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def site(built_site: Path) -> Path:
    return built_site


class Page:
    """A fresh browser context and page that records every request, aborts (and records) any that is not for
    the site itself, and records console errors and uncaught exceptions."""

    def __init__(self, browser, base: str):
        self.base = base
        self.context = browser.new_context(
            viewport={"width": 1280, "height": 900}, permissions=["clipboard-read", "clipboard-write"]
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.external: list[str] = []
        self.requests: list[str] = []
        pg = self.page
        pg.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        pg.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        pg.on("response", lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
        self.context.on("request", lambda r: self.requests.append(r.url))  # the worker's requests too

        def block(route):
            self.external.append(route.request.url)
            route.abort()

        self.context.route(lambda url: not url.startswith(base), block)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser, server):
    p = Page(browser, server)
    yield p
    p.close()


@pytest.fixture(scope="module")
def vectors(site: Path) -> list[dict]:
    v = json.loads((site / "assets" / "plan" / "vectors.json").read_text())
    assert len(v) >= 6 and any(x["rc"] == 2 for x in v) and any(x["files"] for x in v)
    return v


@pytest.fixture(scope="module")
def form(site: Path) -> dict:
    return json.loads((site / "assets" / "plan" / "form.json").read_text())


# ---------------------------------------------------------------- the request as a reader's address
def address(vector: dict, form: dict) -> str:
    """The page's address for a vector, written here from the page's documented scheme (each flag without its
    dashes, a switch as on/off, a custom model as model=custom and its shape as shape.FIELD), not by the page."""
    kinds = {o["flag"]: o["kind"] for o in form["options"]}
    args, params, i = vector["argv"][1:-1], [], 0  # without "plan" and "--json"
    while i < len(args):
        flag = args[i]
        if flag.startswith("--no-"):
            params.append((flag[5:], "off"))
            i += 1
        elif kinds[flag] == "switch":
            params.append((flag[2:], "on"))
            i += 1
        elif flag == "--model" and args[i + 1] in vector["files"]:
            params.append(("model", "custom"))
            for k, v in json.loads(vector["files"][args[i + 1]]).items():
                params.append((f"shape.{k}", ("on" if v else "off") if isinstance(v, bool) else str(v)))
            i += 2
        else:
            params.append((flag[2:], args[i + 1]))
            i += 2
    return "plan/?" + urlencode(params)


def pairs(argv: list[str]) -> list[tuple[str, ...]]:
    """argv as sorted (flag, value) pairs: the order of flags means nothing to argparse."""
    out, i = [], 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append((argv[i], argv[i + 1]))
            i += 2
        else:
            out.append((argv[i],))
            i += 1
    return sorted(out)


def run_cli(argv: list[str], files: dict[str, str]) -> tuple[int, str, str]:
    """The command line itself, in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            Path(tmp, name).write_text(text)
        os.chdir(tmp)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(argv)
        finally:
            os.chdir(here)
    return rc, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- what the page shows
READ_PLANS = """() => [...document.querySelectorAll('#distlab-plan tr[data-index]')].map(tr => ({
  label: tr.dataset.label,
  values: Object.fromEntries([...tr.querySelectorAll('.plan-out')].map(o => [o.dataset.key, Number(o.dataset.value)])),
  text: Object.fromEntries([...tr.querySelectorAll('.plan-out')].map(o => [o.dataset.key, o.textContent])),
}))"""
# The detail shown for plan k, read in the same evaluation that finds it (null until it is there): a wait and a separate
# read raced with the page replacing the detail element on a loaded machine (seen at load average 20 and with two hogs).
READ_DETAIL = """(k) => {
  const d = document.querySelector('#distlab-plan .plan-detail');
  if (!d || Number(d.dataset.index) !== k) return null;
  return {index: Number(d.dataset.index),
          values: Object.fromEntries([...d.querySelectorAll('.plan-out')]
                                     .map(o => [o.dataset.key, Number(o.dataset.value)])),
          text: Object.fromEntries([...d.querySelectorAll('.plan-out')].map(o => [o.dataset.key, o.textContent])),
          reasons: [...d.querySelectorAll('[data-key=reason]')].map(li => li.textContent)};
}"""
CHANGE = """([name, value]) => {
  const e = document.querySelector('#distlab-plan [name=' + name + ']');
  e.value = value;
  const t = performance.now();
  e.dispatchEvent(new Event('input', {bubbles: true}));
  return t;
}"""
ROW_FORMATS = {  # what each cell prints, in Python: the command line's own formats (plan_command's text)
    "memory_bytes_per_gpu": lambda v: f"{v / 1e9:.1f}",
    "step_seconds": lambda v: f"{v:.3g}",
    "mfu": lambda v: f"{v:.1%}",
    "mfu_band.0": lambda v: f"{v:.0%}",
    "mfu_band.1": lambda v: f"{v:.0%}",
    "tokens_per_second": lambda v: f"{v:,.0f}",
    "tflops_per_gpu": lambda v: f"{v:.0f}",
}


def value_at(plan: dict, key: str):
    """plan["mfu_band"][0] for "mfu_band.0", plan["memory_by_category"]["weights"] for "memory.weights"."""
    head, _, rest = key.partition(".")
    if head == "memory":
        return plan["memory_by_category"][rest]
    if head == "time":
        return plan["step_breakdown"][rest]
    if head == "detail":
        return value_at(plan, rest)
    if rest:
        return plan[head][int(rest)]
    return plan[head]


def close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0)


def compare_rows(shown: list[dict], plans: list[dict]) -> list[str]:
    bad = []
    if [r["label"] for r in shown] != [p["label"] for p in plans]:
        return [f"plans differ: page {[r['label'] for r in shown]}, distlab {[p['label'] for p in plans]}"]
    for i, (row, plan) in enumerate(zip(shown, plans)):
        for key, fmt in ROW_FORMATS.items():
            want = value_at(plan, key)
            if not close(row["values"][key], want):
                bad.append(f"plan {i + 1} {key}: page {row['values'][key]!r}, distlab {want!r}")
            if row["text"][key] != fmt(want):
                bad.append(f"plan {i + 1} {key} printed: page {row['text'][key]!r}, distlab {fmt(want)!r}")
    return bad


def compare_detail(detail: dict, plan: dict, best: bool) -> list[str]:
    """Every category of memory and every cause of the step that the plan has, none missing; the MFU band; the
    planner's reasons for the best plan, word for word."""
    bad = []
    keys = {f"memory.{k}" for k in plan["memory_by_category"]} | {f"time.{k}" for k in plan["step_breakdown"]}
    missing = keys - set(detail["values"])
    if missing:
        bad.append(f"not shown: {sorted(missing)}")
    for key, got in detail["values"].items():
        if key.startswith("timeline."):
            continue
        want = value_at(plan, key)
        if not close(got, want):
            bad.append(f"{key}: page {got!r}, distlab {want!r}")
        text = detail["text"][key]
        fmt = (
            f"{want / 1e9:.1f}"
            if key.startswith(("memory.", "detail.memory")) or key == "host_bytes_per_gpu"
            else f"{want:.3g}"
            if key.startswith(("time.", "detail.step"))
            else f"{want:.1%}"
        )
        if text != fmt:
            bad.append(f"{key} printed: page {text!r}, distlab {fmt!r}")
    if best and detail["reasons"] != plan["reasons"]:
        bad.append(f"reasons: page {detail['reasons']}, distlab {plan['reasons']}")
    return bad


def wait_answer(pg, argv: list[str] | None = None, timeout_s: float = 60) -> dict:
    """Poll until the page shows an answer (planned, refused or failed) to a request with the flags and values of
    `argv` (in any order; any request when None), and return the page's state: what it ran, what it showed."""
    deadline = time.monotonic() + timeout_s
    while True:
        # the state and the plans in one evaluation: a state read and a separate read of the rows raced on a loaded
        # machine (seen under `make stress-test` at load 10: "planned" for the request, then no rows read)
        shown = pg.evaluate(
            f"() => ({{...{STATE}, plans: ({READ_PLANS})(), "
            "summary: Boolean(document.querySelector('#distlab-plan .plan-summary'))})"
        )
        done = shown.get("state") in ("planned", "refused", "failed") and "argv" in shown
        if shown.get("state") == "planned" and not shown["summary"]:
            done = False  # the page between answers (its answer's table not there with its state): read it again
        if done and (argv is None or pairs(json.loads(shown["argv"])) == pairs(argv)):
            return shown
        if time.monotonic() > deadline:
            pytest.fail(f"no answer to {argv} within {timeout_s} s; the page: {shown}")
        time.sleep(0.05)


def wait_timeline(pg, timeout_s: float = 30) -> dict:
    """Poll until the chosen plan's timeline is settled (drawn, too large to draw, or failed); return its state."""
    deadline = time.monotonic() + timeout_s
    while True:
        box = pg.evaluate(
            "() => { const t = document.querySelector('#distlab-plan .plan-timeline'); return t && {state: "
            "t.dataset.state, argv: t.dataset.argv && JSON.parse(t.dataset.argv), ops: Number(t.dataset.ops),"
            " text: t.textContent, values: Object.fromEntries([...t.querySelectorAll('.plan-out')].map(o => "
            "[o.dataset.key, Number(o.dataset.value)]))}; }"
        )
        if box and box["state"] in ("drawn", "too-large", "failed", "none"):
            return box
        if time.monotonic() > deadline:
            pytest.fail(
                f"the timeline did not settle within {timeout_s} s: {box}; page {pg.evaluate(f'({{...{STATE}}})')}"
            )
        time.sleep(0.05)


def check_timeline(pg, plan: dict) -> list[str]:
    """The step drawn for the chosen plan is the pipeline simulator's (the command `distlab pipeline` run here on
    the arguments the page gave it), followed by what comes after the last backward, and its length is the plan's
    step time: two independent sums (the simulator's longest path, the cost model's breakdown) that must agree."""
    box = wait_timeline(pg)
    if box["state"] != "drawn":
        return [f"timeline {box['state']}: {box['text'][:300]}"]
    rc, out, err = run_cli(box["argv"], {})
    if rc:
        return [f"distlab {' '.join(box['argv'])} refused: {err}"]
    sim = json.loads(out)
    bad = []
    if box["ops"] != sum(len(s["kind"]) for s in sim["timeline"]):
        bad.append(f"timeline ops: page {box['ops']}, simulator {sum(len(s['kind']) for s in sim['timeline'])}")
    if not close(box["values"]["timeline.pipeline_seconds"], sim["step_time"]):
        bad.append(f"pipeline: page {box['values']['timeline.pipeline_seconds']}, simulator {sim['step_time']}")
    if not math.isclose(box["values"]["timeline.step_seconds"], plan["step_seconds"], rel_tol=1e-9):
        length = box["values"]["timeline.step_seconds"]
        bad.append(f"timeline length {length} != the plan's step {plan['step_seconds']}")
    expected = dict(
        zip(
            ("--stages", "--microbatches", "--schedule"),
            (str(plan["pp"]), str(plan["grad_accumulation"]), plan["schedule"]),
        )
    )
    args = dict(zip(box["argv"][1::2], box["argv"][2::2]))
    if any(args.get(k) != v for k, v in expected.items()):
        bad.append(f"timeline of another plan: {box['argv']} for {plan['label']}")
    return bad


# ---------------------------------------------------------------- the bundle under CPython, no browser
def test_the_bundle_answers_every_vector_alone_under_cpython(site, vectors, tmp_path):
    """The bundle the page runs, unpacked and run by `python -I -S` (the standard library and the bundle, nothing
    else: no site-packages, no repository on the path), through the same entry the page calls, on every vector:
    the same answer as the build's command line, exactly (same interpreter). Would catch a module the planner
    imports that the bundle left out, a data file missing, an entry that mangles argv, stdout or the exit status,
    or a planner module that reaches for numpy or torch."""
    with zipfile.ZipFile(site / "assets" / "plan" / "distlab.zip") as z:
        z.extractall(tmp_path)
    script = (
        "import json, sys\nroot = sys.argv[1]\nsys.path.insert(0, root)\nimport plan_entry\nplan_entry.prepare(root)\n"
        "out = [json.loads(plan_entry.run(json.dumps(v['argv']), json.dumps(v['files']))) for v in "
        "json.load(open(sys.argv[2]))]\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'torch', 'matplotlib'))\n"
        "print(json.dumps({'answers': out, 'heavy': heavy}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", script, str(tmp_path), str(site / "assets" / "plan" / "vectors.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["heavy"] == []
    for v, a in zip(vectors, got["answers"]):
        assert a["rc"] == v["rc"], (v["name"], a["stderr"])
        if v["rc"] == 0:
            assert json.loads(a["stdout"]) == v["plans"], v["name"]
        else:
            assert a["stderr"].strip() == v["stderr"], v["name"]
            assert len(a["stderr"].strip().splitlines()) == 1


def test_each_plans_stage_times_reproduce_its_step(vectors):
    """The per-stage times `distlab plan --json` gives (stage_seconds, what the page's timeline is drawn from), fed to
    `distlab pipeline`, give a pipeline that, with the causes that come after the last backward (exposed data-parallel
    communication, offload, the optimizer), adds up to the plan's step time; and the busiest stage's idle time is the
    plan's bubble. Two independent routes to one number: the simulator's longest path and the cost model's
    breakdown. Would catch stage_seconds of another plan or stage, a bubble the breakdown counts differently from the
    simulator, or a cause of the step left out of the breakdown."""
    checked = 0
    for v in vectors:
        for plan in v.get("plans", []):
            st, b = plan["stage_seconds"], plan["step_breakdown"]
            argv = [
                "pipeline",
                "--stages",
                str(plan["pp"]),
                "--microbatches",
                str(plan["grad_accumulation"]),
                "--schedule",
                plan["schedule"],
                "--forward",
                ",".join(map(repr, st["forward"])),
                "--backward",
                ",".join(map(repr, st["backward"])),
                "--p2p",
                repr(st["p2p"]),
                "--json",
            ]
            if plan["virtual"] > 1:
                argv += ["--virtual", str(plan["virtual"])]
            rc, out, err = run_cli(argv, {})
            assert rc == 0, err
            sim = json.loads(out)
            tail = b["exposed_dp"] + b["offload"] + b["optimizer"]
            assert math.isclose(sim["step_time"] + tail, plan["step_seconds"], rel_tol=1e-12), (
                v["name"],
                plan["label"],
            )
            idle = sim["step_time"] - max(sim["busy"])
            assert math.isclose(idle, b["pipeline_bubble"], rel_tol=1e-9, abs_tol=1e-12), (plan["label"], idle, b)
            checked += 1
    assert checked >= 20


# ---------------------------------------------------------------- the page
def test_plan_page_answers_as_the_command_line_offline(page, vectors, form):
    """One page, one Python start, every vector: opened through its address, the page runs the same request as the
    vector (the same flags and values; a custom shape the same model), shows the same plans in the same order with
    the same numbers printed in the command line's formats, the memory by category, the step by cause, the MFU
    band and the planner's reasons for every plan, the step timeline from the simulator, or the command's one-line
    refusal. Then the reader changes one input, and the copied command line prints the page's answer. Nothing is
    fetched from another host. Would catch a page that computes anything itself, drops or reorders a plan, rounds
    a number differently from the command line, loses a flag between the form and the command, or loads a CDN."""
    pg = page.page
    SCREENSHOTS.mkdir(exist_ok=True)
    problems, timings = [], {}
    first = next(i for i, v in enumerate(vectors) if v["argv"][1:5] == ["--model", "70B", "--nodes", "8"])
    order = [first] + [i for i in range(len(vectors)) if i != first]
    for n, i in enumerate(order):
        v = vectors[i]
        url = address(v, form)
        if n == 0:
            pg.goto(page.base + url, wait_until="domcontentloaded")
        else:  # a new address in the same page, as the back button gives: Python stays warm
            pg.evaluate(
                "(u) => { history.pushState(null, '', u); dispatchEvent(new PopStateEvent('popstate')); }", "/" + url
            )
        shown = wait_answer(pg, v["argv"])  # fails the test when the page runs any other request
        if n == 0:
            timings["first_plan_s"] = float(shown["firstPlanAt"]) / 1000
        files = json.loads(shown["files"])
        if set(files) != set(v["files"]) or any(
            ModelShape(**json.loads(files[k])) != ModelShape(**json.loads(v["files"][k])) for k in files
        ):
            problems.append(f"{v['name']}: the page's files {files}, the vector's {v['files']}")
        cli_line = shown["cli"]
        if v["files"]:
            cli_line = cli_line.split(" && ", 1)[1]
        if pairs(shlex.split(cli_line)[1:] + ["--json"]) != pairs(v["argv"]):
            problems.append(f"{v['name']}: the command shown, {shown['cli']!r}, is not the request")
        if v["rc"] != 0:
            error = pg.locator("#distlab-plan [data-key=error]").inner_text().strip()
            if shown["state"] != "refused" or error != v["stderr"]:
                problems.append(f"{v['name']}: expected the refusal {v['stderr']!r}, page {shown['state']}: {error!r}")
            continue
        if shown["state"] != "planned":
            problems.append(
                f"{v['name']}: page {shown['state']}: " + pg.locator("#distlab-plan [data-key=error]").inner_text()
            )
            continue
        problems += [f"{v['name']}: {b}" for b in compare_rows(shown["plans"], v["plans"])]
        for k, plan in enumerate(v["plans"]):
            if k:
                pg.locator(f"#distlab-plan tr[data-index='{k}']").click()
            detail = pg.wait_for_function(READ_DETAIL, arg=k, timeout=10000).json_value()
            problems += [f"{v['name']} plan {k + 1}: {b}" for b in compare_detail(detail, plan, best=k == 0)]
            if k in (0, len(v["plans"]) - 1):
                problems += [f"{v['name']} plan {k + 1}: {b}" for b in check_timeline(pg, plan)]
        if n == 0:
            pg.locator("#distlab-plan tr[data-index='0']").click()
            wait_timeline(pg)
            pg.screenshot(path=str(SCREENSHOTS / "plan--70b-64.png"), full_page=True)
    assert not problems, "\n".join(problems[:40])

    # one input changed by the reader, timed from the change to the new plan on screen (70B on 64 GPUs, warm)
    replans = []
    pg.goto(page.base + address(vectors[first], form), wait_until="domcontentloaded")
    wait_answer(pg, vectors[first]["argv"])
    for field, value in (("matmul_dtype", "fp8"), ("matmul_dtype", "bf16"), ("task", "finetune")):
        wait_timeline(pg)  # the reader reads the plan, then changes an input
        start = pg.evaluate(CHANGE, [field, value])
        pg.wait_for_function(
            f"(t) => Number({STATE}.shownAt) > t && {STATE}.state !== 'planning'", arg=start, timeout=30000
        )
        replans.append((float(pg.evaluate(f"{STATE}.shownAt")) - start) / 1000)
    timings["replan_s"] = min(replans)
    shown = pg.evaluate(f"() => ({{...{STATE}}})")
    assert shown["state"] == "planned" and "--task" in shown["cli"]
    # the command line the copy button gives prints the page's answer
    pg.locator("#distlab-plan button", has_text="Copy CLI command").click()
    copied = pg.evaluate("navigator.clipboard.readText()")
    assert copied == shown["cli"] and copied.startswith("distlab plan ")
    rc, out, err = run_cli(shlex.split(copied)[1:] + ["--json"], {})
    assert rc == 0, err
    assert not compare_rows(pg.evaluate(READ_PLANS), json.loads(out))

    print(
        f"\nPlan page timings: first plan {timings['first_plan_s']:.2f} s after opening (target "
        f"{FIRST_PLAN_TARGET_S} s), re-plan {timings['replan_s']:.2f} s (best of {len(replans)}; target "
        f"{REPLAN_TARGET_S} s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    (SCREENSHOTS / "plan-timings.json").write_text(json.dumps(timings | {"replans_s": replans}, indent=1))
    assert not page.errors, page.errors
    assert not page.external, f"requests to other hosts: {page.external}"
    assert any("/assets/pyodide/pyodide.asm.wasm" in u for u in page.requests)
    # a timing depends on the machine's load: re-measured on fresh pages (3 opens in all) before it may fail
    attempts = [timings["first_plan_s"]]
    while min(attempts) >= SLACK * FIRST_PLAN_TARGET_S and len(attempts) < 3:
        again = Page(pg.context.browser, page.base)
        try:
            again.page.goto(page.base + address(vectors[first], form), wait_until="domcontentloaded")
            attempts.append(float(wait_answer(again.page, vectors[first]["argv"])["firstPlanAt"]) / 1000)
        finally:
            again.close()
    assert min(attempts) < SLACK * FIRST_PLAN_TARGET_S, f"first plan after opening, {len(attempts)} opens: {attempts}"
    assert timings["replan_s"] < SLACK * REPLAN_TARGET_S, timings


def test_an_address_the_page_wrote_reproduces_its_plan(page, form):
    """A reader's edits (a custom shape started from a preset, a switch turned on, a layout dimension fixed, the
    second plan chosen) go into the address; a fresh browser context opening that address shows the same request
    (the form, the command line, the custom model's file), the same plans as the command line gives for it, and the
    same plan chosen. Would catch an input that the address drops or misreads, or a page that plans before it has
    read its address."""
    pg = page.page
    pg.goto(page.base + "plan/?model=13B&nodes=2", wait_until="domcontentloaded")
    wait_answer(pg)
    root = "#distlab-plan "
    pg.select_option(root + "select[name=model]", "custom")  # starts from 13B's shape
    shape = pg.locator(root + "input[name='shape.layers']")
    assert shape.input_value() == "40"
    shape.fill("44")
    pg.locator(root + "input[name='shape.name']").fill("my 13B, 44 layers")
    pg.locator(root + "input[name=tp_overlap]").check()  # off by default since issue 25
    pg.select_option(root + "select[name=zero]", "1")
    pg.locator(root + "input[name=seq]").fill("2048")
    pg.locator(root + "input[name=seq]").press("Enter")
    request = "plan --model model.json --nodes 2 --seq 2048 --zero 1 --tp-overlap --json".split()
    shown = wait_answer(pg, request)
    assert shown["state"] == "planned", pg.locator(root + "[data-key=error]").inner_text()
    page_shape = ModelShape(**json.loads(json.loads(shown["files"])["model.json"]))
    assert page_shape == dataclasses.replace(preset("13B"), name="my 13B, 44 layers", layers=44)
    pg.locator(root + "tr[data-index='1']").click()
    pg.wait_for_function("() => document.querySelector('#distlab-plan .plan-detail')?.dataset.index == 1")
    href = pg.evaluate("location.href")
    assert "model=custom" in href and "shape.layers=44" in href and "tp-overlap=on" in href and "choose=2" in href

    fresh = Page(pg.context.browser, page.base)
    try:
        fresh.page.goto(href, wait_until="domcontentloaded")
        again = wait_answer(fresh.page)
        assert again["argv"] == shown["argv"] and again["cli"] == shown["cli"] and again["files"] == shown["files"]
        assert json.loads(again["files"])["model.json"] and "--tp-overlap" in again["cli"]
        rc, out, err = run_cli(json.loads(again["argv"]), json.loads(again["files"]))
        assert rc == 0, err
        assert not compare_rows(again["plans"], json.loads(out))
        assert fresh.page.evaluate("document.querySelector('#distlab-plan .plan-detail').dataset.index") == "1"
        assert not fresh.errors and not fresh.external, (fresh.errors, fresh.external)
    finally:
        fresh.close()
    assert not page.errors and not page.external, (page.errors, page.external)


def test_instant_navigation_reaches_the_planner_and_keeps_python_warm(browser, server):
    """Readers reach the page through Material's instant navigation (the content swapped, no reload), for the URLs
    its sitemap lists, which carry site_url's host and port; so the browser opens the site there and Playwright
    answers from the test server, as tests/site/test_browser.py does. The page must plan, and after a chapter and
    back (still no reload) plan again with the same Python, started once. Would catch a script that only runs on
    a full page load, a worker started twice, or a stale popstate handler planning on another page."""
    import re

    canonical = re.search(r"<loc>(.*?)</loc>", urllib.request.urlopen(server + "sitemap.xml").read().decode())
    root = canonical.group(1)[: canonical.group(1).index("/", len("http://")) + 1]
    p = Page(browser, root)

    def proxy(route):
        try:
            with urllib.request.urlopen(server + route.request.url[len(root) :], timeout=30) as resp:
                route.fulfill(status=resp.status, headers=dict(resp.headers), body=resp.read())
        except urllib.error.HTTPError as exc:
            route.fulfill(status=exc.code, headers=dict(exc.headers), body=exc.read())
        except Exception:  # noqa: BLE001 - a request still in flight when the context closes
            pass

    p.context.route(lambda url: url.startswith(root), proxy)
    pg = p.page
    try:
        pg.goto(root, wait_until="networkidle")  # the sitemap is fetched after load
        pg.evaluate("window.__distlabMarker = 42")
        pg.locator("a.md-nav__link[href$='/plan/']:visible").first.click()
        pg.wait_for_url("**/plan/")
        first = wait_answer(pg)
        assert first["state"] == "planned", first
        started = pg.evaluate("window.__distlabPlanner.bootSeconds")
        pg.locator("a.md-nav__link[href$='/12-planner/']:visible").first.click()
        pg.wait_for_url("**/12-planner/")
        pg.go_back()  # Material's popstate: the Plan page again, from its own history entry
        pg.wait_for_url("**/plan/**")
        again = wait_answer(pg)
        assert again["state"] == "planned" and again["argv"] == first["argv"]
        assert pg.evaluate("window.__distlabMarker") == 42, "a page reloaded: instant navigation did not happen"
        assert pg.evaluate("window.__distlabPlanner.bootSeconds") == started, "Python started a second time"
        workers = [u for u in p.requests if u.endswith("/pyodide.asm.wasm")]
        assert len(workers) == 1, workers
        assert not p.errors and not p.external, (p.errors, p.external)
    finally:
        p.close()


def test_other_pages_do_not_load_python(page):
    """The Plan page's script and Pyodide (15 MB) load on the Plan page only: the home page, a chapter and the
    calculator fetch neither. Would catch plan.js moved into extra_javascript, or a prefetch of Pyodide."""
    for path in ("", "12-planner/", "calculator/"):
        page.page.goto(page.base + path, wait_until="load")
    loaded = [u for u in page.requests if "/assets/pyodide/" in u or "/assets/plan" in u]
    assert not loaded, loaded
    assert not page.errors and not page.external
