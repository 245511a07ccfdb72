# Site assets that are not pages: the data and test vectors the calculator's JavaScript reads, and the site's
# offline math (KaTeX). The calculator page itself is a page like any other (gen/pages.py).
#
# The calculator's JavaScript is checked against the library here, in the build itself: docs/assets/calculator.js
# runs under Node on every test vector, and any number, text or verdict that differs from distlab's fails the
# build, naming the vector, both values and the tolerance. Without Node the build says so and skips the check
# (the browser test still enters every vector into the live page).
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mkdocs_gen_files
from mkdocs.exceptions import PluginError

from distlab.calculator import site_data, vectors

REL_TOL = 1e-12  # the same IEEE-754 double operations in the same order: equal unless an operation moved
NUMBERS = ("params", "dp", "weights", "gradients", "optimizer", "activations", "logits", "total", "capacity", "usable",
           "reserved")  # fmt: skip
SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "assets" / "calculator.js"
RUNNER = """
const calc = require(process.argv[1]);
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const { data, vectors } = JSON.parse(input);
  const out = vectors.map((v) => {
    try {
      const r = calc.jobMemory(data, calc.entered(data, v.input));
      return { values: r, display: calc.display(r) };
    } catch (exc) {
      return { error: exc.message };
    }
  });
  process.stdout.write(JSON.stringify(out));
});
"""


def disagreements(vecs: list[dict], got: list[dict]) -> list[str]:
    """Every place where the JavaScript's result differs from distlab's, one line each."""
    bad = []
    for i, (v, g) in enumerate(zip(vecs, got)):
        want, where = v["expected"], f"vector {i} {json.dumps(v['input'], sort_keys=True)}"
        if "error" in want or "error" in g:
            if ("error" in want) != ("error" in g):
                bad.append(
                    f"{where}: distlab {want.get('error', 'computes')!r}, JavaScript {g.get('error', 'computes')!r}"
                )
            continue
        for k in NUMBERS:
            a, b = g["values"].get(k), want[k]
            if not isinstance(a, (int, float)) or not math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0):
                bad.append(f"{where}: {k}: JavaScript {a!r}, distlab {b!r} (tolerance {REL_TOL:g} relative)")
        for k, text in want["display"].items():
            if g["display"].get(k) != text:
                bad.append(f"{where}: {k} text: JavaScript {g['display'].get(k)!r}, distlab {text!r} (exact)")
        for k in ("fits", "stage"):
            if g["values"].get(k) != want[k]:
                bad.append(f"{where}: {k}: JavaScript {g['values'].get(k)!r}, distlab {want[k]!r} (exact)")
    if len(got) != len(vecs):
        bad.append(f"JavaScript answered {len(got)} vectors of {len(vecs)}")
    return bad


def check_javascript(data: dict, vecs: list[dict]) -> None:
    node = shutil.which(os.environ.get("DISTLAB_NODE", "node"))
    if node is None:
        print("distlab: node not found: the calculator's JavaScript is not checked in this build", file=sys.stderr)
        return
    proc = subprocess.run(
        [node, "-e", RUNNER, str(SCRIPT)],
        input=json.dumps({"data": data, "vectors": [{"input": v["input"]} for v in vecs]}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode:
        raise PluginError(f"calculator.js failed under Node: {proc.stderr.strip()[-2000:]}")
    bad = disagreements(vecs, json.loads(proc.stdout))
    if bad:
        more = f"\n... and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise PluginError(
            "page calculator.md: value claim 'calculator.js = distlab.calculator on every vector' failed "
            f"({len(bad)} disagreements over {len(vecs)} vectors):\n" + "\n".join(bad[:20]) + more
        )
    print(f"distlab: calculator.js agrees with distlab on {len(vecs)} vectors (Node)", file=sys.stderr)


# What assets/calculator.js reads (presets, GPUs, bytes per parameter, defaults), and the vectors that
# tests/site/test_browser.py enters into the live page. Sorted keys and fixed indentation: byte-stable rebuilds.
DATA, VECTORS = site_data(), vectors()
check_javascript(DATA, VECTORS)
for name, obj in (("data", DATA), ("vectors", VECTORS)):
    with mkdocs_gen_files.open(f"assets/calculator/{name}.json", "w") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")

# KaTeX, installed from npm by `make setup` into the venv (see the Makefile), served by the site itself:
# no CDN, no request to another host. Only the woff2 fonts: every browser that runs KaTeX reads them.
katex = Path(os.environ.get("DISTLAB_KATEX_DIR", Path(sys.prefix) / "share" / "katex"))
if not (katex / "katex.min.js").exists():
    raise PluginError(
        f"KaTeX not found in {katex}: run `make setup` (it installs KaTeX from npm), "
        "or point DISTLAB_KATEX_DIR at a KaTeX dist/ folder"
    )
files = ["katex.min.js", "katex.min.css", "LICENSE"] + sorted(
    p.relative_to(katex).as_posix() for p in (katex / "fonts").glob("*.woff2")
)
for rel in files:
    with mkdocs_gen_files.open(f"assets/katex/{rel}", "wb") as f:
        f.write((katex / rel).read_bytes())
