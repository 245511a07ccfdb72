"""Build-time glue for gen/ scripts: run a page's experiments, fill its placeholders, list its claims.

A page's prose lives in docs/ and refers to computed values by name; the placeholders are the list of what
the page needs. gen/pages.py calls `build_pages()`, which reads every page, runs the experiments its
placeholders name (in the order they first appear) and fills them in:

    {{ adamw-bytes.mixed_bytes_per_param }}     value with unit (or `| GB`, `| value`, `| .2f`)
    {{ table adamw-bytes.categories }}          a markdown table
    {{ figure adamw-bytes.share }}              a figure with its caption and provenance
    {{ fact gpus.H100-SXM.hbm_gb }}             an outside fact, with a footnote naming its source
    {{ stored roofline }}                       stored GPU measurements of an experiment, stale ones marked
    {{ claims }}                                where the "Checked on this page" box goes (default: end)

An unknown name, a failed claim or an experiment error stops the build with one message that names
the page. Only this module imports mkdocs; the library itself does not.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from distlab.core import experiments
from distlab.core.facts import fact
from distlab.core.formatting import format_quantity
from distlab.core.results import Result

PLACEHOLDER = re.compile(r"\{\{\s*(.+?)\s*\}\}")
ONLY_ENV = "DISTLAB_ONLY"  # comma-separated page paths: build just these (others become a short notice)


class BuildError(Exception):
    """A page cannot be built truthfully. Raised as mkdocs' PluginError during a build."""


def _fail(message: str):
    try:
        from mkdocs.exceptions import PluginError
    except ImportError:  # outside mkdocs (tests calling render directly)
        raise BuildError(message) from None
    raise PluginError(message)


def _log(message: str) -> None:
    print(f"distlab: {message}", file=sys.stderr, flush=True)


class Page:
    def __init__(self, path: str):
        self.path = path
        self.results: dict[str, Result] = {}
        self.stored: dict[str, list[tuple[Result, bool]]] = {}
        self.footnotes: dict[str, str] = {}

    def __enter__(self) -> Page:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.write()

    # ------------------------------------------------------------ experiments
    @property
    def skipped(self) -> bool:
        only = os.environ.get(ONLY_ENV, "")
        return bool(only) and self.path not in only.split(",")

    def run(self, name: str, device: str = "cpu") -> Result | None:
        if self.skipped:
            return None
        start = time.perf_counter()
        try:
            result, cached = experiments.run(name, device)
        except Exception as exc:  # noqa: BLE001 - any failure must name the page and experiment
            _fail(f"page {self.path}: experiment {name!r} failed: {type(exc).__name__}: {exc}")
        _log(f"{name:<28} {'cached' if cached else f'ran in {time.perf_counter() - start:.1f} s'}")
        for claim in result.failed_claims:
            if cached:
                origin = (
                    f"result read from the cache ({experiments.cache_path(name, device)}); delete it or run "
                    f"`distlab run {name} --no-cache`"
                )
            else:
                tries = result.provenance.get("attempts", 1)
                origin = (
                    f"fresh run{f', {tries} attempts' if tries > 1 else ''}; not cached, so the next build "
                    f"measures again; `distlab run {name}` re-runs it alone"
                )
            _fail(
                f"page {self.path}: {claim.kind} claim {claim.name!r} of experiment {name!r} failed: "
                f"{claim.describe()} [{origin}]"
            )
        self.results[name] = result
        self.stored[name] = experiments.stored(name)
        return result

    # ------------------------------------------------------------ rendering
    def render(self, source: str) -> str:
        body = PLACEHOLDER.sub(lambda m: self._expand(m.group(1)), source)
        claims = self.claims_markdown()
        body = body.replace("\x00CLAIMS\x00", claims) if "\x00CLAIMS\x00" in body else body + "\n" + claims
        if self.footnotes:
            body += "\n\n" + "\n".join(f"[^{k}]: {v}" for k, v in self.footnotes.items()) + "\n"
        return body

    def _expand(self, text: str) -> str:
        word, _, rest = text.partition(" ")
        try:
            if text == "claims":
                return "\x00CLAIMS\x00"
            if word == "table":
                exp, name = self._split(rest)
                result = self._result(exp)
                where = f"\n\n<small>{self._where(result.provenance)}</small>" if result.kind == "measured" else ""
                return "\n" + result.tables[name].to_markdown() + where + "\n"
            if word == "figure":
                return self._figure(*self._split(rest))
            if word == "fact":
                return self._fact(rest)
            if word == "stored":
                return self.stored_markdown(rest.strip())
            ref, _, spec = (s.strip() for s in text.partition("|"))
            exp, name = self._split(ref)
            q = self._result(exp).quantities[name]
            return format_quantity(q.value, q.unit, spec)
        except KeyError as exc:
            _fail(f"page {self.path}: unknown placeholder {{{{ {text} }}}}: {exc.args[0]}")

    def _split(self, ref: str) -> tuple[str, str]:
        exp, dot, name = ref.strip().partition(".")
        if not dot:
            raise KeyError(f"{ref!r} is not experiment.name")
        return exp, name

    def _result(self, exp: str) -> Result:
        if exp not in self.results:
            raise KeyError(
                f"experiment {exp!r} is not run by this page's gen script (runs: {', '.join(self.results) or 'none'})"
            )
        return _Lookup(self.results[exp])

    def _figure(self, exp: str, name: str) -> str:
        result = self._result(exp)
        fig = result.figures[name]
        target = f"figures/{exp}--{name}.png"
        _write_bytes(target, fig.png)
        href = "../" * self.path.count("/") + target
        return f"![{fig.caption}]({href})\n\n*{fig.caption}* {self._where(result.provenance, result.kind)}"

    def _fact(self, path: str) -> str:
        f = fact(path.strip())
        key = f"{f.source.key}"
        self.footnotes[key] = f.source.citation()
        return f"{format_quantity(f.value, f.unit)}[^{key}]"

    @staticmethod
    def _where(prov: dict, kind: str = "measured") -> str:
        if kind != "measured":
            return f"({kind}; code {prov.get('code_version', '?')})"
        return (
            f"(measured on {prov.get('hardware', '?')}, torch {prov.get('torch', '?')}, "
            f"code {prov.get('code_version', '?')}, {prov.get('date', '?')})"
        )

    def stored_markdown(self, exp: str) -> str:
        if exp not in self.stored:
            raise KeyError(f"experiment {exp!r} is not run by this page's gen script")
        rows = self.stored[exp]
        if not rows:
            return (
                f'!!! note "No stored GPU results for `{exp}`"\n    None exist yet. On a machine with a '
                f"GPU, `distlab run {exp} --device cuda --store` measures them and writes "
                f"`results/<gpu>/{exp}.json`.\n"
            )
        out = []
        for result, stale in rows:
            p = result.provenance
            flag = " — **stale: the experiment's code changed since**" if stale else ""
            out.append(
                f"**{p.get('hardware')}**, torch {p.get('torch')}, code {p.get('code_version')}, "
                f"{p.get('date')}{flag}\n"
            )
            for name, q in result.quantities.items():
                out.append(f"- {q.description or name}: {format_quantity(q.value, q.unit)}")
            out.append("")
            for table in result.tables.values():
                out += [table.to_markdown(), ""]
            slug = experiments.hardware_slug_of(p.get("hardware", "gpu"))
            for name, fig in result.figures.items():
                target = f"figures/stored-{slug}-{exp}--{name}.png"
                _write_bytes(target, fig.png)
                href = "../" * self.path.count("/") + target
                out += [f"![{fig.caption}]({href})", "", f"*{fig.caption}* {self._where(p)}", ""]
            failed = [c for c in result.claims if not c.passed]
            if failed:
                out.append(
                    "Claims that did not hold on this hardware: "
                    + "; ".join(f"**{c.name}** ({c.describe()})" for c in failed)
                )
        return "\n".join(out)

    def claims_markdown(self) -> str:
        lines = []
        for result in self.results.values():
            for c in result.claims:
                lines.append(
                    f"    - ✅ **{_escape(c.name)}** — {c.describe()}"
                    + (f"; {_escape(c.formula)}" if c.formula else "")
                )
        if not lines:
            return ""
        where = "\n".join(
            f"    - `{exp}`: {self._where(r.provenance, r.kind)}; code: {self._source_link(exp)}"
            for exp, r in self.results.items()
        )
        return (
            f'\n??? success "Checked on this page: {len(lines)} claims, all passed at build time"\n'
            + "\n".join(lines)
            + "\n\n    Experiments:\n\n"
            + where
            + "\n"
        )

    def _source_link(self, exp: str) -> str:
        """[distlab/memory/adamw_bytes.py:92](...): the experiment's function on the site's copy of its module."""
        if not _known(exp):  # a result made outside the registry (tests render such pages)
            return "not a registered experiment"
        spec = experiments.spec(exp)
        if not spec.module.startswith("distlab."):
            return f"`{spec.module}`"
        path = experiments._module_path(spec.module).relative_to(experiments.REPO_DIR).as_posix()
        href = "../" * self.path.count("/") + source_page(path) + f"#__codelineno-0-{spec.line}"
        return f"[{path}:{spec.line}]({href})"

    def write(self) -> None:
        import mkdocs_gen_files

        src = Path(mkdocs_gen_files.config["docs_dir"]) / self.path
        text = src.read_text(encoding="utf-8")
        if self.skipped:
            title = text.splitlines()[0] if text.startswith("# ") else "# (page)"
            text = f"{title}\n\nNot built: {ONLY_ENV} names other pages.\n"
        else:
            text = self.render(text)
        with mkdocs_gen_files.open(self.path, "w") as f:
            f.write(text)
        mkdocs_gen_files.set_edit_path(self.path, self.path)


def _escape(text: str) -> str:
    """Markdown-escape * and _ outside `code` spans, so a claim named "B* = 2B0" is not italicised."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("*", "\\*").replace("_", "\\_")
    return "`".join(parts)


class _Lookup:
    """A result whose missing keys raise KeyError messages that list what exists."""

    def __init__(self, result: Result):
        self._r = result
        self.provenance, self.kind = result.provenance, result.kind
        self.quantities = _Named(result.quantities, f"{result.name} quantity")
        self.tables = _Named(result.tables, f"{result.name} table")
        self.figures = _Named(result.figures, f"{result.name} figure")


class _Named(dict):
    def __init__(self, d: dict, what: str):
        super().__init__(d)
        self.what = what

    def __missing__(self, key):
        raise KeyError(f"no {self.what} {key!r}; known: {', '.join(sorted(self)) or 'none'}")


def _write_bytes(target: str, data: bytes) -> None:
    import mkdocs_gen_files

    with mkdocs_gen_files.open(target, "wb") as f:
        f.write(data)


def experiments_named(text: str) -> list[str]:
    """The experiments a page's placeholders name, in the order they first appear (facts and the claims box
    name none)."""
    names: list[str] = []
    for m in PLACEHOLDER.finditer(text):
        body = m.group(1)
        word, _, rest = body.partition(" ")
        if body == "claims" or word == "fact":
            continue
        if word in ("table", "figure"):
            name = rest.strip().partition(".")[0]
        elif word == "stored":
            name = rest.strip()
        else:
            name = body.partition("|")[0].strip().partition(".")[0]
        if name not in names:
            names.append(name)
    return names


def source_page(path: str) -> str:
    """The site page that shows a source file: distlab/memory/adamw_bytes.py -> code/distlab/memory/adamw_bytes.md"""
    return "code/" + path.removesuffix(".py") + ".md"


def write_source_pages(modules: set[str]) -> None:
    """A page per module, its source with numbered, linkable lines (kept out of the search index): the
    "Checked on this page" box links each experiment there, so a reader gets from a number to its code."""
    import mkdocs_gen_files

    for module in sorted(modules):
        path = experiments._module_path(module)
        rel = path.relative_to(experiments.REPO_DIR).as_posix()
        text = path.read_text(encoding="utf-8")
        fence = "`" * max(4, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
        with mkdocs_gen_files.open(source_page(rel), "w") as f:
            f.write(f'---\nsearch:\n  exclude: true\n---\n\n# `{rel}`\n\n{fence}python linenums="1"\n{text}{fence}\n')


def build_pages() -> None:
    """Every page of docs/ that holds a placeholder: run the experiments it names, render it (gen/pages.py);
    then the source pages of the experiments the pages name."""
    import mkdocs_gen_files

    docs = Path(mkdocs_gen_files.config["docs_dir"])
    modules: set[str] = set()
    for md in sorted(docs.rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        if not PLACEHOLDER.search(text):
            continue  # plain prose: mkdocs serves it as it is
        names = experiments_named(text)
        modules |= {m for m in (experiments.spec(n).module for n in names if _known(n)) if m.startswith("distlab.")}
        with Page(md.relative_to(docs).as_posix()) as page:
            for name in names:
                page.run(name)
    write_source_pages(modules)


def _known(name: str) -> bool:
    try:
        experiments.spec(name)
        return True
    except experiments.UnknownExperiment:
        return False  # Page.run names it in the build's error
