"""Build-time glue for gen/ scripts: run a page's experiments, fill its placeholders, list its claims.

A page's prose lives in docs/ and refers to computed values by name; the placeholders are the list of what
the page needs. gen/pages.py calls `build_pages()`, which reads every page, runs the experiments its
placeholders name (in the order they first appear) and fills them in:

    {{ adamw-bytes.mixed_bytes_per_param }}     value with unit (or `| GB`, `| value`, `| .2f`)
    {{ table adamw-bytes.categories }}          a markdown table
    {{ figure adamw-bytes.share }}              a figure with its caption (provenance once per section)
    {{ fact gpus.H100-SXM.hbm_gb }}             an outside fact, with a footnote naming its source
    {{ stored roofline }}                       stored GPU measurements of an experiment, stale ones marked;
                                                when there are none, the page's one "What a GPU run will add"
                                                line names it (and a heading over nothing else is dropped)
    {{ stored flash-attention-bench | published flash-attention-flops.fa2_published }}
                                                the same, and until a stored measurement exists, a table of
                                                published numbers (sourced) in its place
    {{ claims }}                                where the "Checked on this page" box goes (default: end)

An unknown name, a failed claim or an experiment error stops the build with one message that names
the page. So do three checks over what the pages show (issue 15):

- one value per quantity: the same `experiment.quantity` (or table) shown on two pages with different values
  (compared as value and unit, not as text: one page may write 16 GB and another 16,000,000,000 B). Within one
  build every page reads an experiment's one cached result, so this guards the paths where that breaks (a
  result re-measured between pages, a cache that cannot be written). The same *concept* computed by two
  experiments (TP overhead in chapters 7 and 9) cannot be recognised by name in general; where two pages state
  one thing, they must name one experiment's quantity, and the text must say so where the bases differ;
- a footnote marker glued to a number ("132[^1] SMs" reads as 132¹, copied it is 1321; "80 GB[^3]" reads as
  GB³): `{{ fact }}` puts its marker after the sentence (in a table row, after the row's label), and any marker
  right after a digit or a number's unit fails the build;
- a table or figure is stamped by its numbers' origin: "measured on <machine>" only for measured numbers;
  formula-only tables in a measured experiment say "computed" (`Result.table(..., kind="computed")`).

Only this module imports mkdocs; the library itself does not.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from pathlib import Path
from typing import NoReturn, TypeVar

from distlab.core import experiments
from distlab.core.facts import entries, fact
from distlab.core.formatting import format_quantity, prose
from distlab.core.results import Claim, Figure, Quantity, Result, Table

PLACEHOLDER = re.compile(r"\{\{\s*(.+?)\s*\}\}")
ONLY_ENV = "DISTLAB_ONLY"  # comma-separated page paths: build just these (others become a short notice)
FOOTNOTE = "\x01{}\x02"  # where a fact's marker was, until place_footnotes() moves it after the sentence


class BuildError(Exception):
    """A page cannot be built truthfully. Raised as mkdocs' PluginError during a build."""


def _fail(message: str) -> NoReturn:
    try:
        from mkdocs.exceptions import PluginError
    except ImportError:  # outside mkdocs (tests calling render directly)
        raise BuildError(message) from None
    raise PluginError(message)


def _log(message: str) -> None:
    print(f"distlab: {message}", file=sys.stderr, flush=True)


class Shown:
    """What every page of one build showed: `experiment.quantity` -> (value, unit, page), `experiment.table` ->
    (markdown, page). A second page showing the same name with another value fails the build."""

    def __init__(self) -> None:
        self.quantities: dict[str, tuple[float, str, str]] = {}
        self.tables: dict[str, tuple[str, str]] = {}

    def quantity(self, ref: str, value: float, unit: str, page: str) -> None:
        first = self.quantities.setdefault(ref, (value, unit, page))
        if (first[0], first[1]) != (value, unit) and not _both_nan(first[0], value):
            _fail(
                f"page {page}: {ref} shows {format_quantity(value, unit)} ({value!r} {unit}) but page {first[2]} "
                f"showed {format_quantity(first[0], first[1])} ({first[0]!r} {first[1]}): one quantity, one value "
                "on every page (was the experiment re-run between pages?)"
            )

    def table(self, ref: str, markdown: str, page: str) -> None:
        first = self.tables.setdefault(ref, (markdown, page))
        if first[0] != markdown:
            _fail(f"page {page}: table {ref} differs from the one page {first[1]} showed: one table, one content")


def _both_nan(a, b) -> bool:
    return isinstance(a, float) and isinstance(b, float) and a != a and b != b


class Page:
    def __init__(self, path: str, shown: Shown | None = None, homes: dict[str, str] | None = None):
        self.path = path
        self.homes = homes or {}
        """experiment -> the first page (docs order) that names it: its claims are listed there, run everywhere."""
        self.results: dict[str, Result] = {}
        self.stored: dict[str, list[tuple[Result, bool]]] = {}
        self.footnotes: dict[str, str] = {}
        self.shown = shown if shown is not None else Shown()
        self.to_come: list[str] = []
        """Experiments whose `{{ stored }}` found no GPU measurement: the page's one "to come" line names them."""

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
        body = place_footnotes(PLACEHOLDER.sub(lambda m: self._expand(m.group(1)), source))
        glued = glued_footnotes(body)
        if glued:
            _fail(
                f"page {self.path}: footnote marker right after a number ({'; '.join(glued[:5])}): it reads as an "
                "exponent or an extra digit; put it after the noun or the sentence"
            )
        body = takeaway_first(fold_provenance(drop_empty_sections(body)))
        claims = self.to_come_markdown() + self.claims_markdown()
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
                table = result.tables[name]
                markdown = table.to_markdown()
                self.shown.table(f"{exp}.{name}", markdown, self.path)
                return "\n" + markdown + self._stamp(result.provenance, table.kind or result.kind) + "\n"
            if word == "figure":
                return self._figure(*self._split(rest))
            if word == "fact":
                return self._fact(rest)
            if word == "stored":
                exp, _, fallback = (s.strip() for s in rest.partition("|"))
                return self.stored_markdown(exp, fallback)
            ref, _, spec = (s.strip() for s in text.partition("|"))
            exp, name = self._split(ref)
            q = self._result(exp).quantities[name]
            self.shown.quantity(f"{exp}.{name}", q.value, q.unit, self.path)
            return prose(q.value, q.unit, spec)
        except KeyError as exc:
            _fail(f"page {self.path}: unknown placeholder {{{{ {text} }}}}: {exc.args[0]}")

    def _split(self, ref: str) -> tuple[str, str]:
        exp, dot, name = ref.strip().partition(".")
        if not dot:
            raise KeyError(f"{ref!r} is not experiment.name")
        return exp, name

    def _result(self, exp: str) -> _Lookup:
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
        return f"![{fig.caption}]({href})\n\n*{fig.caption}*" + self._stamp(result.provenance, fig.kind or result.kind)

    def _fact(self, path: str) -> str:
        f = fact(path.strip())
        if not isinstance(f.value, (int, float)):  # a bool is an int: it shows as yes / no
            _fail(f"page {self.path}: {{{{ fact {path.strip()} }}}} is {f.value!r}, not a number a page can show")
        key = f"{f.source.key}"
        self.footnotes[key] = f.source.citation()
        return format_quantity(f.value, f.unit) + FOOTNOTE.format(key)

    @staticmethod
    def _stamp(prov: dict, kind: str = "measured") -> str:
        """Where a table's or figure's numbers come from, as a marker that `fold_provenance` shows once per section
        (once per page for the page's one machine); the code version and date of each experiment are in the claims
        box's list of experiments."""
        if kind == "published":
            text = "published figures, transcribed with their sources in distlab/data/; not measured here"
        elif kind != "measured":
            text = f"{kind}; code {prov.get('code_version', '?')}"
        else:
            text = f"measured on {prov.get('hardware', '?')}, torch {prov.get('torch', '?')}"
        return STAMP.format(text)

    @staticmethod
    def _where(prov: dict, kind: str = "measured") -> str:
        if kind == "published":
            return "(published figures, transcribed with their sources in distlab/data/; not measured here)"
        if kind != "measured":
            return f"({kind}; code {prov.get('code_version', '?')})"
        return (
            f"(measured on {prov.get('hardware', '?')}, torch {prov.get('torch', '?')}, "
            f"code {prov.get('code_version', '?')}, {prov.get('date', '?')})"
        )

    def stored_markdown(self, exp: str, fallback: str = "") -> str:
        """Stored GPU measurements of `exp`. None yet: nothing here (the page's one "to come" line names it) or,
        with `fallback` = "published other-exp.table", that table of published numbers in their place."""
        if exp not in self.stored:
            raise KeyError(f"experiment {exp!r} is not run by this page's gen script")
        rows = self.stored[exp]
        published = ""
        if fallback:
            word, _, ref = fallback.partition(" ")
            if word != "published":
                raise KeyError(f"stored {exp} | {fallback!r}: the only option is 'published experiment.table'")
            p_exp, p_name = self._split(ref)
            p_result = self._result(p_exp)
            table = p_result.tables[p_name]
            self.shown.table(f"{p_exp}.{p_name}", table.to_markdown(), self.path)
            published = (
                f"Published numbers, until our own GPU measurement of `{exp}` replaces them:\n\n"
                + table.to_markdown()
                + self._stamp(p_result.provenance, table.kind or p_result.kind)
                + "\n"
            )
        if not rows:
            if exp not in self.to_come:
                self.to_come.append(exp)
            return published or EMPTY
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

    def to_come_markdown(self) -> str:
        """One line for the page, no heading and no banner: what a GPU run will add to it."""
        if not self.to_come:
            return ""
        names = [f"`{e}` ({_describe(e)})" for e in self.to_come]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return (
            f"\n*What a GPU run will add:* {listed} (`distlab run NAME --device cuda --store`). Until then this page "
            "shows what the build machine's CPU measures, and published numbers where they exist.\n"
        )

    def claims_markdown(self) -> str:
        """The "Checked on this page" box, collapsed: one collapsed group per experiment (its claims by family:
        the words before the first ": " that several claims share), and the datasheet relations that several
        experiments repeat folded into one line that expands, each shown once."""
        data: dict[str, Claim] = {}
        groups: list[tuple[str, list[Claim]]] = []
        for exp, result in self.results.items():
            own = []
            for c in result.claims:
                if is_data_check(c.name):
                    data.setdefault(c.name, c)
                else:
                    own.append(c)
            groups.append((exp, own))
        total = len(data) + sum(len(own) for _, own in groups)
        if not total:
            return ""
        out = [f'\n??? success "Checked on this page: {total} claims, all passed at build time"']
        out.append(
            "    Grouped by the experiment whose numbers they guard; open a group to see each claim, its measured "
            "and expected values and tolerance.\n"
        )
        for exp, own in groups:
            r = self.results[exp]
            home = self.homes.get(exp, self.path)
            if home != self.path:  # checked in this build too; listed once, on the page that teaches it
                link = "../" * self.path.count("/") + home
                out.append(
                    f"    - ✅ `{exp}`: {len(own)} claim{'s' if len(own) != 1 else ''}, all passed in this page's "
                    f"build; listed on [{home.removesuffix('.md')}]({link})"
                )
                continue
            out.append(f'    ??? success "`{exp}`: {len(own)} claim{"s" if len(own) != 1 else ""}"')
            out.append(f"        {self._where(r.provenance, r.kind)}; code: {self._source_link(exp)}\n")
            out += ["        " + line for line in _claim_lines(own)]
            out.append("")
        if data:
            chips = sorted({name.split(": ", 1)[0] for name in data})
            out.append(
                f'    ??? note "Data-file consistency: {len(data)} relations the datasheet figures of '
                f'{", ".join(chips)} must satisfy (distlab/data/gpus.toml)"'
            )
            out += ["        " + line for line in _claim_lines(list(data.values()))]
            out.append("")
        return "\n".join(out) + "\n"

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


def _describe(exp: str) -> str:
    try:
        return experiments.spec(exp).description
    except experiments.UnknownExperiment:
        return "not a registered experiment"


def _claim_lines(claims: list[Claim]) -> list[str]:
    """Markdown list items, one per claim; claims that share the words before their first ": " (a model, a shape,
    a chip) are listed under that family once."""
    families: dict[str, list[Claim]] = {}
    for c in claims:
        families.setdefault(_family(c.name)[0], []).append(c)
    lines = []
    for c in claims:
        head, rest = _family(c.name)
        members = families[head]
        if head and len(members) > 1:
            if members[0] is c:
                lines.append(f"- **{_escape(head)}**")
                lines += [f"    - ✅ {_describe_claim(m, _family(m.name)[1])}" for m in members]
            continue
        lines.append(f"- ✅ {_describe_claim(c, c.name)}")
    return lines


def _family(name: str) -> tuple[str, str]:
    """("7B", "bytes") for "7B: bytes"; no family where the ": " sits inside brackets ("(v0.14.3: current)")."""
    head, sep, rest = name.partition(": ")
    balanced = all(head.count(a) == head.count(b) for a, b in ("()", "[]", "{}"))
    return (head, rest) if sep and balanced else ("", name)


def _describe_claim(c: Claim, label: str) -> str:
    return f"**{_escape(label)}** — {c.describe()}" + (f"; {_escape(c.formula)}" if c.formula else "")


def is_data_check(name: str) -> bool:
    """A claim named after a chip of distlab/data/gpus.toml ("H100-SXM: tf32 dense peak = bf16 dense peak / 2") is
    a relation that chip's datasheet figures must satisfy (hardware.gpus.data_claims): every experiment built on
    the chip repeats it, so the claims box shows it once, folded."""
    head, sep, _ = name.partition(": ")
    return bool(sep) and head in _gpu_entries()


@functools.cache
def _gpu_entries() -> frozenset[str]:
    return frozenset(entries("gpus"))


# ---------------------------------------------------------------- provenance once per section, empty sections gone
STAMP = "\x03{}\x04"
_STAMP = re.compile("\x03([^\x04]*)\x04")
EMPTY = "\x05"  # a `{{ stored }}` with nothing stored: a heading over nothing else is dropped
_HEADING = re.compile(r"#{1,6} ")
_SECTION = re.compile(r"#{1,2} ")


def fold_provenance(text: str) -> str:
    """Each table's and figure's stamp ("measured on AMD EPYC (2 cores), torch 2.13.0+cpu", "computed; code ...")
    shown once per section (a # or ## heading), where it first applies; a page whose measurements all come from one
    machine names it once. Nothing is lost: the claims box lists each experiment's machine, code and date."""
    measured = {m for m in _STAMP.findall(text) if m.startswith("measured on")}
    one_machine = len(measured) == 1
    seen_page: set[str] = set()
    seen: set[str] = set()
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and _SECTION.match(line):
            seen = set()
        parts = _STAMP.split(line)  # text, stamp, text, stamp, ..., text
        for k in range(1, len(parts), 2):
            stamp, page_wide = parts[k], one_machine and parts[k] in measured
            where = seen_page if page_wide else seen
            note = "; every measurement on this page" if page_wide else ""
            inline = line.startswith("*")  # after a caption; else under a table
            shown = f" ({stamp}{note})" if inline else f"\n\n<small>({stamp}{note})</small>"
            parts[k] = "" if stamp in where else shown
            where.add(stamp)
        out.append("".join(parts))
    return "\n".join(out)


def takeaway_first(text: str) -> str:
    """A chapter's takeaway box (`!!! abstract`) before its notation table, so that the results to remember are on
    the reader's first screen (issue 30; tests/site/test_reading.py measures it at 1440x900). Only a box and a
    table above the first ## section move; the table follows the box unchanged."""
    lines = text.split("\n")
    first_section = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    box = next((i for i in range(first_section) if lines[i].startswith("!!! abstract")), None)
    table = next((i for i in range(first_section) if lines[i].startswith("|")), None)
    if box is None or table is None or table > box:
        return text
    end = box + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("    ")):
        end += 1
    block = lines[box:end]
    while block and not block[-1].strip():
        block.pop()
    rest = lines[:box] + lines[end:]
    return "\n".join(rest[:table] + block + [""] + rest[table:])


def drop_empty_sections(text: str) -> str:
    """A heading over nothing but `{{ stored }}` placeholders with nothing stored ("### Measured on a GPU") is
    dropped with them: the page's one line says what the GPU run will add."""
    lines = text.split("\n")
    keep = [True] * len(lines)
    heads = [i for i, line in enumerate(lines) if _HEADING.match(line)] + [len(lines)]
    for start, end in zip(heads, heads[1:]):
        body = "".join(lines[start + 1 : end])
        if EMPTY in body and not body.replace(EMPTY, "").strip():
            keep[start] = False
    return "\n".join(line for line, k in zip(lines, keep) if k).replace(EMPTY, "")


# ---------------------------------------------------------------- footnotes: after the sentence, never on a digit
# A sentence ends at . ! or ? before a space or the line's end (closing quotes, brackets and emphasis go with it),
# not after an abbreviation.
_NOT_AN_END = "".join(rf"(?<!\b{a})" for a in (r"e\.g", r"i\.e", "vs", "al", "cf", "Fig", "Eq"))
_SENTENCE_END = re.compile(_NOT_AN_END + r"[.!?](?=[\s\"')*_\]]|$)[\"')*_\]]*")
_BLOCK_START = re.compile(r"\s*(?:[-*+] |\d+\. |#|\||[?!]{3}|```|\$\$)")
_TITLE = re.compile(r"\s*[?!]{3}")
_MARK = re.compile("\x01([^\x02]*)\x02")
# Units a number is written with on this site: a marker right after one reads as an exponent ("80 GB³").
_UNIT = (
    r"(?:[KMGTP]i?B(?:/s)?|B(?:/s)?|[kMGTP]?FLOP(?:/s)?|[kMGT]?bit/s|[GT]b/s|%|s|ms|µs|us|ns|W|[kMG]Hz"
    r"|B/param|tokens(?:/s)?)"
)
_GLUED = re.compile(r"(?:\d|\d[x×]|\d\s?" + _UNIT + r")[*_)]*(\[\^[^\]\s]+\])(?!:)")


def place_footnotes(text: str) -> str:
    """Move each fact's footnote marker from its number to the end of its sentence (in a table row: the end of
    the row's first cell, its label; in an admonition's title: the first sentence of its body), so that no marker
    sits on a digit. Several markers at one place keep their order, each once."""
    lines = text.split("\n")
    out: list[str] = []
    pending: list[str] = []  # markers whose sentence continues on a later line
    for i, raw in enumerate(lines):
        marks = [(m.start(), m.group(1)) for m in _MARK.finditer(raw)]
        line = _MARK.sub("", raw)
        # each marker's position in the cleaned line
        keys, removed = [], 0
        for pos, key in marks:
            keys.append((pos - removed, key))
            removed += len(FOOTNOTE.format(key))
        if keys and line.lstrip().startswith("|"):  # a table row: after its label
            cells = line.split("|")
            cells[1] = cells[1].rstrip() + "".join(f"[^{k}]" for k in dict.fromkeys(k for _, k in keys)) + " "
            out.append("|".join(cells))
            continue
        if not keys and not pending:
            out.append(line)
            continue
        if _TITLE.match(line):  # an admonition's title cannot hold a marker: carry it into the body
            pending += [k for _, k in keys]
            out.append(line)
            continue
        inserts: dict[int, list[str]] = {}
        todo = [(0, k) for k in pending] + keys
        pending = []
        ends = [m.end() for m in _SENTENCE_END.finditer(line)]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        paragraph_ends = not nxt.strip() or bool(_BLOCK_START.match(nxt))
        for pos, key in todo:
            at = next((e for e in ends if e > pos), None)
            if at is None and paragraph_ends:
                at = len(line.rstrip())
            if at is None:
                pending.append(key)
            else:
                inserts.setdefault(at, []).append(key)
        for at in sorted(inserts, reverse=True):
            line = _insert_marks(line, at, inserts[at])
        out.append(line)
    if pending:
        out[-1] = _insert_marks(out[-1], len(out[-1].rstrip()), pending)
    return "\n".join(out)


def _insert_marks(line: str, at: int, keys: list[str]) -> str:
    """The markers at `at`; where that is right after a number with no sentence end (a list item "HBM: 80 GB"),
    after the last word before the number instead ("HBM[^x]: 80 GB"), the noun it qualifies."""
    marks = "".join(f"[^{k}]" for k in dict.fromkeys(keys))
    if _GLUED.search(line[:at] + marks):
        number = list(re.finditer(r"\d[\d.,]*", line[:at]))
        word = list(re.finditer(r"[A-Za-z][\w-]*", line[: number[-1].start()])) if number else []
        if word:
            at = word[-1].end()
        else:
            return line[:at] + f" (source{marks})" + line[at:]
    return line[:at] + marks + line[at:]


def glued_footnotes(text: str) -> list[str]:
    """Footnote markers right after a digit or a number's unit: "2[^x] epochs", "80 GB[^x]"."""
    bad = []
    for line in text.split("\n"):
        for m in _GLUED.finditer(line):
            bad.append(line[max(0, m.start() - 25) : m.end()].strip())
    return bad


def _escape(text: str) -> str:
    """Markdown-escape * and _ outside `code` spans, so a claim named "B* = 2B0" is not italicised."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("*", "\\*").replace("_", "\\_")
    return "`".join(parts)


_V = TypeVar("_V")


class _Named(dict[str, _V]):
    """A dict whose missing key raises a KeyError that lists the keys it has."""

    def __init__(self, d: dict[str, _V], what: str):
        super().__init__(d)
        self.what = what

    def __missing__(self, key):
        raise KeyError(f"no {self.what} {key!r}; known: {', '.join(sorted(self)) or 'none'}")


class _Lookup:
    """A result whose missing keys raise KeyError messages that list what exists."""

    def __init__(self, result: Result):
        self._r = result
        self.provenance, self.kind = result.provenance, result.kind
        self.quantities: _Named[Quantity] = _Named(result.quantities, f"{result.name} quantity")
        self.tables: _Named[Table] = _Named(result.tables, f"{result.name} table")
        self.figures: _Named[Figure] = _Named(result.figures, f"{result.name} figure")


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
            name, _, fallback = (s.strip() for s in rest.partition("|"))
            published = fallback.partition(" ")[2].partition(".")[0]
            for n in (name, published):
                if n and n not in names:
                    names.append(n)
            continue
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
    shown = Shown()  # one value per quantity across the pages of this build
    texts = {md.relative_to(docs).as_posix(): md.read_text(encoding="utf-8") for md in sorted(docs.rglob("*.md"))}
    homes: dict[str, str] = {}  # every page counts, built or not, so a claim is listed on the same page always
    for path, text in texts.items():
        for name in experiments_named(text):
            homes.setdefault(name, path)
    with experiments.one_scan():
        for path, text in texts.items():
            if not PLACEHOLDER.search(text):
                continue  # plain prose: mkdocs serves it as it is
            names = experiments_named(text)
            modules |= {m for m in (experiments.spec(n).module for n in names if _known(n)) if m.startswith("distlab.")}
            with Page(path, shown, homes) as page:
                for name in names:
                    page.run(name)
    write_source_pages(modules)


def _known(name: str) -> bool:
    try:
        experiments.spec(name)
        return True
    except experiments.UnknownExperiment:
        return False  # Page.run names it in the build's error
