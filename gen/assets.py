# Site assets that are not pages: the data and test vectors the calculator's JavaScript reads, and the site's
# offline math (KaTeX). The calculator page itself is a page like any other (gen/pages.py).
import json
import os
import sys
from pathlib import Path

import mkdocs_gen_files

from distlab.calculator import site_data, vectors

# What assets/calculator.js reads (presets, GPUs, bytes per parameter, defaults), and the vectors that
# tests/test_browser.py enters into the live page. Sorted keys and fixed indentation: byte-stable rebuilds.
for name, obj in (("data", site_data()), ("vectors", vectors())):
    with mkdocs_gen_files.open(f"assets/calculator/{name}.json", "w") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")

# KaTeX, installed from npm by `make setup` into the venv (see the Makefile), served by the site itself:
# no CDN, no request to another host. Only the woff2 fonts: every browser that runs KaTeX reads them.
katex = Path(os.environ.get("DISTLAB_KATEX_DIR", Path(sys.prefix) / "share" / "katex"))
if not (katex / "katex.min.js").exists():
    from mkdocs.exceptions import PluginError

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
