"""The site as readers use it: the full build served on 127.0.0.1 and opened in a real headless
Chromium (Debian's /usr/bin/chromium, driven by Playwright; never a Playwright browser download).

`make test` installs chromium when it is missing (`make browser`). Every page is loaded, checked and
photographed into screenshots/ (gitignored) for a person to review.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from playwright.sync_api import Error as PlaywrightError

from distlab.calculator import evaluate

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "screenshots"
# Quiet offline: without the background-networking flags Chromium tries Google's hosts at every start.


# ---------------------------------------------------------------- fixtures
class Watch:
    """What a page did that a reader would not want: console errors, uncaught exceptions, failed
    responses, and requests to any host other than the site's own (aborted, and recorded)."""

    def __init__(self, context, page, base: str):
        self.errors: list[str] = []
        self.external: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("response", lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)

        def block(route):
            self.external.append(route.request.url)
            route.abort()

        context.route(lambda url: not url.startswith(base) and not url.startswith("data:"), block)

    def clear(self) -> None:
        self.errors.clear()
        self.external.clear()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.watch = Watch(context, pg, server)
    pg.base = server
    yield pg
    context.close()


def _pages(site: Path) -> list[str]:
    """Every page of the build as a URL path: index.html files and 404.html."""
    paths = sorted(p.parent.relative_to(site).as_posix() for p in site.rglob("index.html"))
    return ["" if p == "." else p + "/" for p in paths] + ["404.html"]


# ---------------------------------------------------------------- every page
MATH_STATE = """() => {
  const all = [...document.querySelectorAll('.arithmatex')];
  return {total: all.length, rendered: all.filter(e => e.dataset.rendered && e.querySelector('.katex')).length,
          errors: document.querySelectorAll('.katex-error').length,
          font: all.length ? document.fonts.check('16px KaTeX_Main') : true};
}"""
IMAGES_STATE = """() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"""


def test_every_page_loads_clean_renders_math_and_images(built_site, page):
    """Every page: no console error, no failed request, no request to another host (a CDN font or
    script, a Google Font), every image decoded, every formula typeset by the site's own KaTeX with
    its own fonts. Would catch a missing asset, a broken script after instant navigation, a figure
    written under the wrong path, or math left as raw TeX."""
    SCREENSHOTS.mkdir(exist_ok=True)
    problems, math_pages = [], 0
    for path in _pages(built_site):
        page.watch.clear()
        page.goto(page.base + path, wait_until="load")
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('.arithmatex')].every(e => e.dataset.rendered)", timeout=5000
            )
            page.evaluate("() => document.fonts.ready.then(() => true)")
        except Exception:  # noqa: BLE001 - reported below with the page's state
            pass
        maths = page.evaluate(MATH_STATE)
        broken_images = page.evaluate(IMAGES_STATE)
        slug = path.strip("/").replace("/", "--").replace(".html", "") or "index"
        page.screenshot(path=str(SCREENSHOTS / f"{slug}.png"), full_page=True)
        math_pages += maths["total"] > 0
        if page.watch.errors:
            problems.append(f"{path}: {page.watch.errors}")
        if page.watch.external:
            problems.append(f"{path}: requests to other hosts {page.watch.external}")
        if maths["rendered"] != maths["total"] or maths["errors"] or not maths["font"]:
            problems.append(f"{path}: math {maths}")
        if broken_images:
            problems.append(f"{path}: images that did not render {broken_images}")
    assert not problems, "\n".join(problems)
    assert math_pages >= 2, "expected math on the home page and chapter 1 at least"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str]] = []  # (attribute, url)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("canonical",)):
                self.refs.append((f"<{tag} {key}>", a[key]))


def test_no_broken_internal_link_or_anchor_and_nothing_loaded_from_elsewhere(built_site):
    """Every href/src in every built page: internal ones must reach a file and, with a #fragment, an
    element with that id on the target page; nothing the page loads (script, style, image) may come
    from another host. Would catch a chapter renamed without its links, a heading anchor that
    changed, or a CDN script slipped into a template."""
    parsed: dict[Path, _Links] = {}

    def parse(path: Path) -> _Links:
        if path not in parsed:
            p = _Links()
            p.feed(path.read_text(encoding="utf-8"))
            parsed[path] = p
        return parsed[path]

    broken = []
    for html in sorted(built_site.rglob("*.html")):
        url = "http://site/" + html.relative_to(built_site).as_posix()
        for attr, ref in parse(html).refs:
            target = urlsplit(urljoin(url, ref))
            if target.scheme in ("mailto", "data", "javascript"):
                continue
            if target.netloc != "site":
                if attr in ("<script src>", "<img src>", "<link href>", "<iframe src>", "<source src>"):
                    broken.append(f"{html.relative_to(built_site)}: {attr} loads from another host: {ref}")
                continue
            file = built_site / unquote(target.path.lstrip("/"))
            if target.path.endswith("/") or file.is_dir():
                file = file / "index.html"
            if not file.exists():
                broken.append(f"{html.relative_to(built_site)}: {attr} {ref} -> missing {file.relative_to(built_site)}")
            elif target.fragment and file.suffix == ".html" and unquote(target.fragment) not in parse(file).ids:
                broken.append(f"{html.relative_to(built_site)}: {ref} -> no anchor #{target.fragment}")
    assert not broken, "\n".join(broken[:50])
    assert len(parsed) >= 20


CHAPTER = re.compile(r"^\d\d-")


def test_every_written_chapter_has_the_reading_shape(built_site):
    """Every numbered chapter that is written (not a "Being written" stub, not skipped by
    DISTLAB_ONLY): a notation table before its first section, a takeaway box, collapsible worked
    problems, the "Checked on this page" box with where each experiment ran, and previous/next links.
    Would catch a chapter that lost its claims box (a gen script that stopped running experiments),
    or a page shape that drifted from chapter 1's."""
    problems, written, stubs = [], [], []
    for folder in sorted(p for p in built_site.iterdir() if p.is_dir() and CHAPTER.match(p.name)):
        html = (folder / "index.html").read_text(encoding="utf-8")
        article = html.split("<article", 1)[1].split("</article>", 1)[0]
        if "Being written" in article or "Not built: DISTLAB_ONLY" in article:
            stubs.append(folder.name)
            continue
        written.append(folder.name)
        checks = {
            "notation table": "<table" in article.split("<h2", 1)[0],
            "takeaway box": 'class="admonition abstract"' in article,
            "worked problems": '<details class="question"' in article,
            "checked on this page": re.search(r'<details class="success">\s*<summary>Checked on this page', article),
            "provenance": re.search(r"\((measured on|computed; code|simulated; code)", article),
            "previous/next links": "md-footer__link--prev" in html and "md-footer__link--next" in html,
        }
        problems += [f"{folder.name}: no {what}" for what, ok in checks.items() if not ok]
    assert written, f"no written chapter to check (stubs: {stubs})"
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- what readers do
def test_search_finds_zero(page):
    """Search runs offline (its index and worker are the site's own) and finds ZeRO."""
    page.goto(page.base, wait_until="load")
    page.locator("input.md-search__input").click()
    page.keyboard.type("ZeRO", delay=30)  # key events, as a reader types: Material searches on keyup
    items = page.locator(".md-search-result__item")
    items.first.wait_for(timeout=10000)
    text = " ".join(items.all_inner_texts())
    assert "ZeRO" in text, text[:500]
    raw = page.evaluate(
        "() => [...document.querySelectorAll('.md-search-result__item')]"
        ".filter(e => /\\\\\\(/.test(e.innerText)).length"
    )
    assert raw == 0, "search results show raw TeX: \\( ... \\) not typeset"
    assert not page.watch.errors and not page.watch.external


def test_palette_code_copy_and_footer_links(page):
    """Light/dark toggle, code-copy buttons, previous/next links at the foot of a chapter."""
    page.goto(page.base, wait_until="load")
    scheme = lambda: page.evaluate("document.body.getAttribute('data-md-color-scheme')")
    first = scheme()
    page.locator("form[data-md-component='palette'] label:visible").first.click()
    assert {first, scheme()} == {"default", "slate"}
    copy = "button[data-md-type='copy'], button.md-clipboard"  # Material 9.8, and before
    assert page.locator(copy).count() >= 1, "no copy button on the home page's code block"
    page.goto(page.base + "calculator/", wait_until="load")
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    page.screenshot(path=str(SCREENSHOTS / "calculator--dark.png"), full_page=False)

    page.goto(page.base + "01-where-the-bytes-go/", wait_until="load")
    assert page.locator("a.md-footer__link--prev").count() == 1
    assert page.locator("a.md-footer__link--next").count() == 1
    assert not page.watch.errors and not page.watch.external


def test_instant_navigation_keeps_math_and_calculator_working(browser, server):
    """Material's instant navigation swaps pages without a reload, for the URLs its sitemap lists,
    which carry site_url's host and port. So the browser opens the site at that address, and
    Playwright answers it from the test server (nothing binds that port). Would catch math or the
    calculator that only initialise on a full page load, or a site_url that disables instant loading."""
    canonical = re.search(r"<loc>(.*?)</loc>", urllib.request.urlopen(server + "sitemap.xml").read().decode())
    assert canonical, "empty sitemap.xml: instant navigation needs site_url in mkdocs.yml"
    root = canonical.group(1)
    root = root[: root.index("/", len("http://")) + 1]  # scheme://host:port/
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    watch = Watch(context, page, root)
    closing = False

    def proxy(route):
        try:
            with urllib.request.urlopen(server + route.request.url[len(root) :], timeout=10) as resp:
                status, headers, body = resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            status, headers, body = exc.code, dict(exc.headers), exc.read()
        try:
            route.fulfill(status=status, headers=headers, body=body)
        except PlaywrightError:
            if not closing:  # only a request still in flight when the context closes may go unanswered
                raise

    context.route(lambda url: url.startswith(root), proxy)
    page.goto(root, wait_until="networkidle")  # the sitemap is fetched after load
    page.evaluate("window.__distlabMarker = 42")
    page.locator("article a[href$='/calculator/']").first.click()  # instant navigation makes hrefs absolute
    page.wait_for_url("**/calculator/")
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.arithmatex')].every(e => e.dataset.rendered)", timeout=5000
    )
    assert page.evaluate("window.__distlabMarker") == 42, "the page reloaded: instant navigation did not happen"
    page.locator("a.md-nav__link[href$='/01-where-the-bytes-go/']:visible").first.click()  # its math, again
    page.wait_for_url("**/01-where-the-bytes-go/")
    page.wait_for_function(
        "() => document.querySelectorAll('.arithmatex').length > 0 && "
        "[...document.querySelectorAll('.arithmatex')].every(e => e.dataset.rendered)",
        timeout=5000,
    )
    assert page.evaluate("window.__distlabMarker") == 42
    page.wait_for_load_state("networkidle")
    assert not watch.errors and not watch.external, (watch.errors, watch.external)
    closing = True
    context.close()


# ---------------------------------------------------------------- the live calculator
SET_AND_READ = """(inp) => {
  const root = document.getElementById('distlab-calculator');
  const form = root.querySelector('form');
  const set = (k, v) => {
    const e = form.elements[k];
    if (e.type === 'checkbox') e.checked = v; else e.value = String(v);
    e.dispatchEvent(new Event('input', {bubbles: true}));
  };
  set('model', inp.model);
  if (inp.model === 'custom')
    for (const k of ['layers', 'hidden', 'heads', 'kv_heads', 'ffn', 'vocab', 'mlp', 'tie_embeddings', 'context',
                     'experts', 'top_k']) set(k, inp[k]);
  for (const k of ['seq', 'micro_batch', 'gpus', 'gpu', 'zero', 'tp', 'pp', 'recompute', 'sequence_parallel',
                   'attention', 'dropout', 'precision', 'capacity_factor'])
    set(k, inp[k]);
  const stage = root.querySelector('[data-key=stage]');
  const out = {state: root.dataset.state, values: {}, text: {}, stage: stage.dataset.stage || null,
               verdict: root.querySelector('[data-key=verdict]').dataset.fits,
               error: root.querySelector('[data-key=error]').dataset.error || null,
               search: window.location.search};
  root.querySelectorAll('.calc-out').forEach(o => {
    out.values[o.dataset.key] = o.dataset.value === undefined ? null : Number(o.dataset.value);
    out.text[o.dataset.key] = o.textContent;
  });
  return out;
}"""
NUMBERS = (
    "params",
    "dp",
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "logits",
    "total",
    "capacity",
    "usable",
    "reserved",
)


def _compare(shown: dict, expected: dict) -> list[str]:
    """Numbers within 1e-12 relative (the JavaScript does the same IEEE-754 double operations in the
    same order, so they agree to the last bit unless an operation moved); the text exactly as the
    site's format_quantity prints it; the verdict and the stage shown exactly."""
    if "error" in expected:
        return [] if shown["state"] == "error" and shown["error"] else [f"expected refusal ({expected['error']})"]
    bad = []
    if shown["state"] == "error":
        return [f"page refused: {shown['error']}"]
    for k in NUMBERS:
        got, want = shown["values"][k], expected[k]
        if got is None or not math.isclose(got, want, rel_tol=1e-12, abs_tol=0):
            bad.append(f"{k}: page {got!r}, distlab {want!r}")
    for k, want in expected["display"].items():
        got = shown["text"][k]
        if got != want:
            bad.append(f"{k} text: page {got!r}, distlab {want!r}")
    if shown["verdict"] != str(expected["fits"]).lower():
        bad.append(f"verdict: page fits={shown['verdict']}, distlab fits={expected['fits']}")
    if shown["stage"] != expected["stage"]:
        bad.append(f"stage: page {shown['stage']}, distlab {expected['stage']}")
    return bad


def test_calculator_agrees_with_distlab_on_every_vector(built_site, page):
    """The build's vectors (computed by distlab.calculator) entered into the live page, one by one:
    every number, its printed text, the verdict and the stage shown must match, and every refused input must
    be refused. They include Llama, GPT and MoE presets with FlashAttention on and off. Would catch the
    JavaScript drifting from the Python (a changed formula, a preset or GPU capacity typed into the page, a
    ZeRO stage off by one, a rounding rule that differs, a preset that does not bring its sequence)."""
    vectors = json.loads((built_site / "assets" / "calculator" / "vectors.json").read_text())
    assert len(vectors) >= 100
    flash = {(v["input"]["model"], v["input"]["attention"]) for v in vectors}
    assert {
        ("7B", "flash"),
        ("7B", "eager"),
        ("175B", "flash"),
        ("175B", "eager"),
        ("Mixtral-8x7B", "flash"),
        ("Mixtral-8x7B", "eager"),
    } <= flash
    page.goto(page.base + "calculator/", wait_until="load")
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    failures = []
    for i, v in enumerate(vectors):
        shown = page.evaluate(SET_AND_READ, v["input"])
        bad = _compare(shown, v["expected"])
        if bad:
            failures.append(f"vector {i} {v['input']}: " + "; ".join(bad))
    assert not failures, "\n".join(failures[:20])
    assert not page.watch.errors and not page.watch.external


def _form_inputs(page) -> dict:
    """What the form holds, as the keys of distlab.calculator.evaluate's inputs."""
    raw = page.evaluate("""() => {
      const f = document.querySelector('#distlab-calculator form'), out = {};
      for (const e of f.elements) if (e.name) out[e.name] = e.type === 'checkbox' ? e.checked : e.value;
      return out;
    }""")
    inputs = {k: raw[k] for k in ("model", "gpu", "recompute", "attention", "precision")}
    for k in ("seq", "micro_batch", "gpus", "zero", "tp", "pp"):
        inputs[k] = int(raw[k])
    inputs |= {"sequence_parallel": raw["sequence_parallel"], "dropout": raw["dropout"]}
    inputs["capacity_factor"] = float(raw["capacity_factor"] or 0)
    return inputs


def test_calculator_updates_as_the_reader_types(page):
    """Typing, not scripting: keystrokes into the micro-batch field and a ZeRO stage picked from the
    menu change the numbers and the verdict at once, to what distlab computes for the same inputs."""
    page.goto(page.base + "calculator/", wait_until="load")
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    root = page.locator("#distlab-calculator")
    defaults = _form_inputs(page)
    for micro_batch, zero in ((8, defaults["zero"]), (8, 0), (1, 3)):
        box = page.locator("input[name='micro_batch']")
        box.click(click_count=3)
        page.keyboard.type(str(micro_batch))
        page.select_option("select[name='zero']", str(zero))
        want = evaluate(defaults | {"micro_batch": micro_batch, "zero": zero})
        assert root.locator("[data-key='total']").inner_text() == want["display"]["total"]
        verdict = root.locator("[data-key='verdict']").inner_text()
        assert verdict.startswith("Fits" if want["fits"] else "Does not fit"), verdict
    page.locator("input[name='gpus']").fill("7")  # 7 GPUs with the default TP x PP still computes...
    page.locator("input[name='tp']").fill("2")  # ...but TP 2 does not divide 7: refused, not a wrong number
    assert re.search(r"must be a multiple of TP x PP", root.locator("[data-key='error']").inner_text())
    assert root.locator("[data-key='total']").inner_text() == "—"
    assert not page.watch.errors and not page.watch.external


def test_calculator_presets_bring_their_sequence_and_flash_default(page):
    """Choosing GPT-3 sets s = 2048 and eager attention with dropout (how it trained); Llama 3 8B sets 8192 and
    FlashAttention. Would catch the issue's 175B that kept 4096, or a missing FlashAttention default."""
    page.goto(page.base + "calculator/", wait_until="load")
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    for name, seq, attention, dropout in (("175B", 2048, "eager", True), ("Llama-3-8B", 8192, "flash", False)):
        page.select_option("select[name='model']", name)
        got = _form_inputs(page)
        assert (got["seq"], got["attention"], got["dropout"]) == (seq, attention, dropout), name
        want = evaluate(got)
        assert page.locator("#distlab-calculator [data-key='total']").inner_text() == want["display"]["total"]
    assert not page.watch.errors and not page.watch.external


def test_calculator_url_holds_the_inputs(page):
    """A shared link opens the same configuration, and typing writes the inputs back into the address. Would
    catch a query string that is ignored, or a form whose state cannot be shared."""
    query = "model=Llama-3-70B&gpus=64&tp=8&pp=4&zero=1&sequence_parallel=1&micro_batch=2&precision=mixed-fp32-grads"
    page.goto(page.base + "calculator/?" + query, wait_until="load")
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    got = _form_inputs(page)
    assert (got["model"], got["gpus"], got["tp"], got["pp"], got["zero"]) == ("Llama-3-70B", 64, 8, 4, 1)
    assert got["sequence_parallel"] and got["micro_batch"] == 2 and got["seq"] == 8192
    want = evaluate(got)
    assert page.locator("#distlab-calculator [data-key='total']").inner_text() == want["display"]["total"]
    box = page.locator("input[name='micro_batch']")
    box.click(click_count=3)
    page.keyboard.type("3")
    search = page.evaluate("window.location.search")
    assert "micro_batch=3" in search and "model=Llama-3-70B" in search and "precision=mixed-fp32-grads" in search
    page.goto(page.base + "calculator/" + search, wait_until="load")  # the written address opens the same job
    page.wait_for_selector("#distlab-calculator[data-ready='true']", timeout=10000)
    again = _form_inputs(page)
    assert again == got | {"micro_batch": 3}
    assert not page.watch.errors and not page.watch.external
