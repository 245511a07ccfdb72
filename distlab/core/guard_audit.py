"""Guard audit (issue 26): does every realistic mistake that moves a number on a page fail that page's build?

For every page, the numbers it shows (its placeholders, rendered as the site renders them) are traced to

- every numeric field of distlab/data/*.toml that an experiment of the page reads (traced while it runs) or that
  the page shows itself (`{{ fact }}`), perturbed as a typo would: x2, /2, its last significant digit off by one;
- every numeric constant and arithmetic operator in the formula modules those experiments execute (a module that
  registers no experiment and imports no torch): a constant x2 or dropped (`2 * x` -> `x`), `+`/`-` and `*`/`/`
  swapped, an exponent changed (`x ** 2` -> `x ** 3`);
- the numbers and operators of the calculator's JavaScript, checked by the build's own Node check (gen/assets.py).

Each perturbation runs alone, in a forked child of a process that has imported torch once: the distlab modules
above core are dropped from `sys.modules` and imported again with the perturbation applied (a patched module
source, a patched data dict), the page's experiments that executed the perturbed code (or read the perturbed
field) in the baseline run are called directly (fresh, no cache), and the page's placeholders are rendered with
site.Page. A perturbation *reaches* a page when one of its numbers changes; it is *guarded* when a value claim of
an experiment of that page then fails. One that reaches a page and is not guarded is an escape. A perturbation
that makes an experiment raise stops the build without a silent number: it is reported as a count, not in N/M.

Measured experiments run as well, limited to their formula side: a placeholder whose text differs between two
baseline runs is measured noise and is not compared, an escape there counts only when it reproduces (one more
unperturbed and one more perturbed run print what the first ones did: two baselines can agree by chance), ranks
started by the launcher import the unperturbed source, and an experiment whose baseline takes longer than `--cap`
seconds is not run per perturbation (the output lists them). Timing claims are ignored: only a value claim counts
as a guard.

Why no mutation-testing library: the maintained ones on PyPI (mutmut 3.8, cosmic-ray 8.7) drive a test runner
over mutants they write to disk (mutmut's trampolines, cosmic-ray's session database and +1/-1 number operators);
the oracle here is not a test suite but a page rendered in-process under one perturbation, grouped by experiment
and filtered by coverage, and a third of the perturbations are in TOML data and JavaScript, which neither mutates.
The operators the issue names are a few lines over the standard library's `ast`, so no dependency is added.

    python -m distlab.core.guard_audit                         # every page
    python -m distlab.core.guard_audit --page appendix-07-context-expert-deep-dive.md \
        --file distlab/model_parallel/context_parallel.py
    python -m distlab.core.guard_audit --changed main          # CI: pages whose experiments import a changed file

Exclusions (numbers that are inputs, not results) are listed with their reasons in guard-audit.toml.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import importlib.abc
import importlib.util
import json
import os
import pickle
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from distlab.core import experiments, facts, sources

REPO = sources.REPO_DIR
DOCS = REPO / "docs"
CONFIG = REPO / "guard-audit.toml"
MAX_JOBS = 2  # the project's machines have two cores
CORE = "distlab.core"
_SWAP: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
}
_SYMBOL: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**"}


# ---------------------------------------------------------------- pages and their placeholders
@dataclass(frozen=True)
class PageSpec:
    path: str
    placeholders: tuple[str, ...]
    """Every placeholder that shows a number: `exp.q`, `table exp.t`, `figure exp.f`, `fact file.entry.field`."""
    experiments: tuple[str, ...]


def placeholder_experiment(text: str) -> str | None:
    """The experiment a placeholder shows (None for a fact)."""
    word, _, rest = text.partition(" ")
    if word == "fact":
        return None
    if word in ("table", "figure"):
        return rest.strip().partition(".")[0]
    return text.partition("|")[0].strip().partition(".")[0]


def pages(docs: Path = DOCS) -> list[PageSpec]:
    from distlab.core.site import PLACEHOLDER, experiments_named

    out = []
    for md in sorted(docs.rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        shown = []
        for m in PLACEHOLDER.finditer(text):
            body = m.group(1).strip()
            if body == "claims" or body.startswith("stored ") or body in shown:
                continue
            shown.append(body)
        if shown:
            out.append(PageSpec(md.relative_to(docs).as_posix(), tuple(shown), tuple(experiments_named(text))))
    return out


# ---------------------------------------------------------------- perturbations
@dataclass(frozen=True)
class Mutant:
    file: str
    """Repository-relative path."""
    line: int
    change: str
    """What was typed wrong, as a reviewer would say it."""
    op: tuple
    """("code", node index, action, value) | ("data", key path, new value) | ("js", offset, old, new)."""

    @property
    def key(self) -> str:
        return f"{self.file}:{self.line}: {self.change}"


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


# Keyword arguments that only style a drawing (its size, fonts, line widths, legend spacing, layout margins): a
# change moves pixels of a figure, whose data the page's claims read back, never a number the page states.
STYLE_KEYWORDS = frozenset(
    (
        "figsize",
        "fontsize",
        "lw",
        "linewidth",
        "markersize",
        "ms",
        "alpha",
        "dpi",
        "pad",
        "rect",
        "handlelength",
        "columnspacing",
        "labelspacing",
        "borderpad",
        "width_ratios",
        "height_ratios",
    )
)


def _skipped_constant(node: ast.Constant, parents: dict) -> bool:
    """Constants that are not quantities: indices and slices, annotations, text formatting, call positions, and a
    drawing's styling (STYLE_KEYWORDS)."""
    child, p = node, parents.get(node)
    while p is not None:
        if isinstance(p, ast.keyword) and p.arg in STYLE_KEYWORDS:
            return True
        if isinstance(p, ast.Subscript) and child is p.slice:
            return True
        if isinstance(p, (ast.JoinedStr, ast.arg)) or (isinstance(p, ast.AnnAssign) and child is p.annotation):
            return True
        if isinstance(p, ast.Call) and getattr(p.func, "id", None) in ("round", "range", "enumerate", "isclose"):
            return True
        if isinstance(p, ast.Call) and getattr(p.func, "attr", None) == "claim":
            return True  # a claim's reference: changing it never moves a number on a page
        if isinstance(p, (ast.stmt, ast.comprehension)):
            return False
        child, p = p, parents.get(p)
    return False


def _in_claim(node: ast.AST, parents: dict) -> bool:
    p = parents.get(node)
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.Call) and getattr(p.func, "attr", None) == "claim":
            return True
        p = parents.get(p)
    return False


def _text_operand(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(
        node, (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp)
    )


def code_mutants(path: Path) -> list[Mutant]:
    """Every perturbation of a formula module, in a stable order (the index of its node in ast.walk)."""
    rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = _parents(tree)
    docstrings = {id(_docstring(n)) for n in ast.walk(tree) if _has_docstring(n)}
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Constant) and _number(node) and id(node) not in docstrings:
            if _skipped_constant(node, parents):
                continue
            v: Any = node.value
            p = parents.get(node)
            if isinstance(p, ast.BinOp) and isinstance(p.op, ast.Pow) and p.right is node:
                out.append(Mutant(rel, node.lineno, f"exponent {v!r} -> {v + 1!r}", ("code", i, "set", v + 1)))
                continue
            if v != 0:
                out.append(Mutant(rel, node.lineno, f"constant {v!r} -> {v * 2!r} (x2)", ("code", i, "set", v * 2)))
            if isinstance(p, ast.BinOp) and not isinstance(p.op, ast.Pow) and v not in (0, 1):
                sym = _SYMBOL.get(type(p.op), "op")
                out.append(Mutant(rel, node.lineno, f"constant {v!r} dropped (`{sym} {v!r}`)", ("code", i, "drop", 0)))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _SWAP:
            if isinstance(node, ast.BinOp) and (_text_operand(node.left) or _text_operand(node.right)):
                continue
            if _in_claim(node, parents):
                continue
            a, b = _SYMBOL[type(node.op)], _SYMBOL[_SWAP[type(node.op)]]
            suffix = "=" if isinstance(node, ast.AugAssign) else ""
            out.append(Mutant(rel, node.lineno, f"`{a}{suffix}` -> `{b}{suffix}`", ("code", i, "swap", 0)))
    return out


def _docstring(n: Any) -> ast.AST:
    return n.body[0].value


def _has_docstring(n: ast.AST) -> bool:
    return (
        isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and bool(n.body)
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    )


def mutated_code(path: Path, op: tuple):
    """The module's code object with one perturbation applied (line numbers kept)."""
    _, index, action, value = op
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = _parents(tree)
    node: Any = next(n for i, n in enumerate(ast.walk(tree)) if i == index)
    if action == "set":
        node.value = value
    elif action == "swap":
        node.op = _SWAP[type(node.op)]()
    else:  # drop: the BinOp becomes its other operand
        binop: Any = parents[node]
        other = binop.right if binop.left is node else binop.left
        _replace(parents[binop], binop, other)
    return compile(ast.fix_missing_locations(tree), str(path), "exec")


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
        elif isinstance(value, list):
            parent.__dict__[name] = [new if v is old else v for v in value]


def typo(v: int | float) -> int | float:
    """The last significant digit off by one (up, or down from a 9): 400 -> 500, 3.35 -> 3.36, 0.2027 -> 0.2028."""
    if isinstance(v, int):
        zeros = len(str(abs(v))) - len(str(abs(v)).rstrip("0")) if v else 0
        step = 10**zeros
        digit = (abs(v) // step) % 10
        return v + (step if digit != 9 else -step) * (1 if v >= 0 else -1)
    text = repr(v)
    if "e" in text or "inf" in text or "nan" in text:
        return v * 1.1
    decimals = len(text.partition(".")[2].rstrip("0"))
    step = 10.0**-decimals
    digit = int(text.rstrip("0").rstrip(".")[-1])
    return round(v + (step if digit != 9 else -step) * (1 if v >= 0 else -1), decimals + 1)


def data_mutants(path: tuple) -> list[Mutant]:
    """x2, /2 and a one-digit typo of one numeric field (path = (file, entry, ..., field))."""
    name, *keys = path
    v = _get(facts.dataset(name), keys)
    rel = f"distlab/data/{name}.toml"
    line = _toml_line(rel, keys)
    where = ".".join(str(k) for k in keys)
    half = v // 2 if isinstance(v, int) and v % 2 == 0 else v / 2
    out = []
    for new, how in ((v * 2, "x2"), (half, "/2"), (typo(v), "one digit off")):
        if new != v:
            out.append(Mutant(rel, line, f"{where} = {v!r} -> {new!r} ({how})", ("data", tuple(path), new)))
    return out


def _get(d, keys):
    for k in keys:
        d = d[k]
    return d


def _toml_line(rel: str, keys: list) -> int:
    """The line of a field in its TOML file (its entry's table, then the field): for the report only."""
    lines = (REPO / rel).read_text(encoding="utf-8").splitlines()
    entry = str(keys[0])
    start = next((i for i, s in enumerate(lines) if s.strip().strip("[]").strip('"') == entry), 0)
    leaf = str(next((k for k in reversed(keys) if isinstance(k, str)), keys[-1]))
    return next(
        (i + 1 for i in range(start, len(lines)) if re.match(rf"\s*\"?{re.escape(leaf)}\"?\s*=", lines[i])), start + 1
    )


# ---------------------------------------------------------------- the child: run experiments under one perturbation
class _SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from a perturbed code object."""

    def __init__(self, module: str, code):
        self.module, self.code = module, code

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        return importlib.util.spec_from_file_location(fullname, sources.module_path(fullname), loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(self.code, module.__dict__)  # the perturbed module's own source


class _CountingFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the formula modules with a first statement in every function that notes the call (a baseline run's
    coverage: far cheaper than sys.settrace, which pays for every call torch makes too)."""

    def __init__(self, formula: set[str], hits: set):
        self.formula, self.hits = formula, hits

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("distlab.") or str(sources.module_path(fullname)) not in self.formula:
            return None
        return importlib.util.spec_from_file_location(fullname, sources.module_path(fullname), loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        path = module.__spec__.origin
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = ast.Constant((path, _first_line(node), node.name))
                note = ast.Expr(
                    ast.Call(ast.Attribute(ast.Name("__guard_hits__", ast.Load()), "add", ast.Load()), [key], [])
                )
                node.body.insert(0, ast.copy_location(note, node.body[0]))
        module.__dict__["__guard_hits__"] = self.hits
        exec(compile(ast.fix_missing_locations(tree), path, "exec"), module.__dict__)


def _first_line(node: Any) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


class _Traced(dict):
    """A data file's dict that notes which numeric fields are read (a field of a row read whole counts)."""

    def __init__(self, d: dict, path: tuple, log: set):
        super().__init__({k: _wrap(v, path + (k,), log) for k, v in d.items()})
        self._path, self._log = path, log

    def _note(self, k, v) -> None:
        if _numeric(v):
            self._log.add(self._path + (k,))
        elif isinstance(v, list):
            self._log.update(self._path + (k, i) for i, x in enumerate(v) if _numeric(x))

    def __getitem__(self, k):
        v = super().__getitem__(k)
        self._note(k, v)
        return v

    def get(self, k, default=None):
        return self[k] if k in self else default

    def __iter__(self):
        for k, v in super().items():
            self._note(k, v)
        return super().__iter__()

    def items(self):
        self.__iter__()
        return super().items()

    def values(self):
        self.__iter__()
        return super().values()


def _numeric(v) -> bool:
    return type(v) in (int, float)


def _wrap(v, path, log):
    if isinstance(v, dict):
        return _Traced(v, path, log)
    if isinstance(v, list):
        return [_wrap(x, path + (i,), log) if isinstance(x, (dict, list)) else x for i, x in enumerate(v)]
    return v


def _set(d, keys, value) -> None:
    for k in keys[:-1]:
        d = d[k]
    d[keys[-1]] = value


@dataclass
class Run:
    """What one experiment gave in a child: its rendered placeholders, failed value claims or error."""

    rendered: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    covered: set = field(default_factory=set)
    """(file, first line, name) of every formula function it called (baseline only)."""
    modules: set = field(default_factory=set)
    """Formula files it imported (baseline only)."""
    reads: set = field(default_factory=set)
    """Data fields it read, (file, entry, ..., field) (baseline only)."""


def _child(names: list[str], shown: dict[str, list[str]], op: Mutant | None, trace: bool, formula: set[str]) -> dict:
    """In a forked child: apply `op`, import the experiments afresh, run them, render what they show."""
    os.environ["DISTLAB_CACHE"] = tempfile.mkdtemp(prefix="guard-audit-")
    reads: set = set()
    original = facts.dataset
    if trace:
        facts.dataset = lambda name: _Traced(original(name), (name,), reads)  # type: ignore[assignment]
    if op is not None and op.op[0] == "data":
        _, (file, *keys), new = op.op
        patched = copy.deepcopy(original(file))
        _set(patched, keys, new)
        facts.dataset = lambda n, file=file: patched if n == file else original(n)  # type: ignore[assignment]
    if op is not None and op.op[0] == "code":
        module = sources.module_name(REPO / op.file)
        sys.meta_path.insert(0, _SourceFinder(module, mutated_code(REPO / op.file, op.op)))
    for m in [m for m in sys.modules if m.startswith("distlab.") and not m.startswith(CORE)]:
        del sys.modules[m]
    _fresh_multiprocessing()
    experiments._REGISTRY.clear()
    hits: set = set()
    if trace:
        sys.meta_path.insert(0, _CountingFinder(formula, hits))
    out = {}
    for name in names:
        run = Run()
        hits.clear()
        start = time.perf_counter()
        try:
            run.failed, run.rendered = _execute(name, shown.get(name, []))
        except BaseException as exc:  # noqa: BLE001 - any failure is the perturbation's outcome
            run.error = f"{type(exc).__name__}: {str(exc)[:200]}"
        run.seconds = time.perf_counter() - start
        run.covered = set(hits)
        run.modules = {m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None) in formula}
        out[name] = run
    if trace:
        for run in out.values():
            run.reads = reads  # reads of all experiments of this child (one experiment per baseline child)
    out[""] = Run(rendered={p: _render_fact(p) for p in shown.get("", [])})
    return out


PLAN = "@plan"
PLAN_SCRIPT = "gen/plan_page.py"
"""The Plan page's pseudo-experiment: `distlab plan --json` on the page's own requests (gen/plan_page.py)."""


def _execute(name: str, placeholders: list[str]) -> tuple[list[str], dict[str, str]]:
    """Run one experiment (or the Plan page's requests): its failed value claims and its rendered numbers."""
    if name == PLAN:
        vectors = _gen_names(PLAN_SCRIPT, ("CUSTOM_SHAPE", "PLAN_VECTORS", "plan_vectors"))["plan_vectors"]()
        return [], {f"{PLAN}.{v['name']}": json.dumps(v, sort_keys=True) for v in vectors}
    result = experiments.get(name).function("cpu")
    failed = [f"{c.name!r}: {c.describe()}" for c in result.claims if c.kind == "value" and not c.passed]
    return failed, _render(name, result, placeholders)


def _fresh_multiprocessing() -> None:
    """A forked child gets its own fork server and resource tracker: the inherited ones belong to the parent (their
    liveness checks wait on a pid that is not this process's child)."""
    from multiprocessing import forkserver, resource_tracker

    server = forkserver.ForkServer()
    forkserver._forkserver = server
    forkserver.ensure_running = server.ensure_running
    forkserver.get_inherited_fds = server.get_inherited_fds
    forkserver.connect_to_new_process = server.connect_to_new_process
    forkserver.set_forkserver_preload = server.set_forkserver_preload
    tracker = resource_tracker.ResourceTracker()
    resource_tracker._resource_tracker = tracker
    resource_tracker.ensure_running = tracker.ensure_running
    resource_tracker.register = tracker.register
    resource_tracker.unregister = tracker.unregister
    resource_tracker.getfd = tracker.getfd


def _render(name: str, result, placeholders: list[str]) -> dict[str, str]:
    from distlab.core.site import Page

    result.name = name
    page = Page("guard-audit.md")
    page.results[name] = result
    out = {}
    for text in placeholders:
        try:
            if text.startswith("figure "):
                fig = result.figures[text.split(".", 1)[1]]
                out[text] = f"{fig.caption} png:{hashlib.sha256(fig.png).hexdigest()[:12]}"
            else:
                out[text] = page._expand(text)
        except Exception as exc:  # noqa: BLE001 - a placeholder the result no longer has stops the page's build
            out[text] = f"(cannot render: {type(exc).__name__}: {exc})"
    return out


def _render_fact(text: str) -> str:
    f = facts.fact(text.partition(" ")[2].strip())
    return f"{f.value!r} {f.unit}"


def fork_call(fn, args: tuple, timeout: float):
    """fn(*args) in a forked child, its pickled answer back; ("timeout"|"crash", message) when it has none."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: whatever happens, it never returns into the audit's loop
        try:
            os.close(r)
            try:
                os.setpgid(0, 0)
                _die_with_parent()
                answer = ("ok", fn(*args))
            except BaseException as exc:  # noqa: BLE001
                answer = ("crash", f"{type(exc).__name__}: {exc}")
            try:
                data = pickle.dumps(answer)
            except Exception as exc:  # noqa: BLE001
                data = pickle.dumps(("crash", f"unpicklable answer: {exc}"))
            with os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    with os.fdopen(r, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([f], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                _kill(pid)
                return ("timeout", f"no answer after {timeout:.0f} s")
            chunk = os.read(f.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    _kill(pid)  # its process group: ranks or servers it left
    return pickle.loads(b"".join(chunks)) if chunks else ("crash", "the child died without an answer")


def _die_with_parent() -> None:
    """The kernel kills this child when the audit dies (Linux), so an interrupted audit leaves nothing running."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# ---------------------------------------------------------------- the calculator's JavaScript, checked under Node
JS_FILES = {"docs/assets/calculator.js": ("calculator.md", "gen/assets.py")}
"""A script the site serves -> (the page that shows its numbers, the gen script whose Node check guards it)."""
_JS_TOKEN = re.compile(
    r"//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|`(?:\\.|[^`\\])*`"  # comments and strings
    r"|(?P<num>(?<![\w.$])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.]))"
    r"|(?P<op>(?<![+\-*/=<>!&|])[+\-*/](?![+\-*/=>]))",
    re.S,
)


def js_mutants(rel: str) -> list[Mutant]:
    """Numbers x2 and binary + - * / swapped in a script (comments and strings skipped)."""
    text = (REPO / rel).read_text(encoding="utf-8")
    out = []
    for m in _JS_TOKEN.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m.group("num"):
            old = m.group("num")
            value = float(old)
            if value == 0 or _js_index(text, m.start()):
                continue
            new = repr(int(value * 2)) if value.is_integer() and "." not in old else repr(value * 2)
            out.append(Mutant(rel, line, f"constant {old} -> {new} (x2)", ("js", m.start(), old, new)))
        elif m.group("op"):
            before = text[: m.start()].rstrip()
            if not before or not (before[-1].isalnum() or before[-1] in ")]_$"):
                continue  # a sign, not a binary operator
            if re.search(r"\b(return|typeof|case|in|of)$", before):
                continue
            old = m.group("op")
            new = {"+": "-", "-": "+", "*": "/", "/": "*"}[old]
            out.append(Mutant(rel, line, f"`{old}` -> `{new}`", ("js", m.start(), old, new)))
    return out


def _js_index(text: str, at: int) -> bool:
    return text[:at].rstrip().endswith("[")


def _gen_check(script: str) -> dict:
    """The Node runner and the comparison of a gen script, read from its source (it builds the site when run)."""
    return _gen_names(script, ("RUNNER", "REL_TOL", "NUMBERS", "disagreements"))


def _gen_names(script: str, names: tuple[str, ...]) -> dict:
    """Some constants and functions of a gen script (with its imports, mkdocs' aside), read from its source: the
    script itself builds part of the site when it runs."""
    tree = ast.parse((REPO / script).read_text(encoding="utf-8"))
    keep: list[ast.stmt] = [
        n
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        and not any("mkdocs" in (a.name or "") for a in n.names)
        and "mkdocs" not in (getattr(n, "module", "") or "")
        or isinstance(n, ast.Assign)
        and any(getattr(t, "id", "") in names for t in n.targets)
        or isinstance(n, ast.FunctionDef)
        and n.name in names
    ]
    namespace: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), script, "exec"), namespace)  # our own gen script
    return namespace


def js_outputs(script_text: str, runner: str, data: dict, vecs: list[dict]) -> list | str:
    """What the script answers on every vector under Node (a text when it fails)."""
    node = shutil.which(os.environ.get("DISTLAB_NODE", "node"))
    if node is None:
        return "node not found"
    with tempfile.TemporaryDirectory(prefix="guard-audit-js-") as tmp:
        path = Path(tmp) / "script.js"
        path.write_text(script_text, encoding="utf-8")
        proc = subprocess.run(
            [node, "-e", runner, str(path)],
            input=json.dumps({"data": data, "vectors": [{"input": v["input"]} for v in vecs]}),
            capture_output=True,
            text=True,
            timeout=60,
        )
    if proc.returncode:
        return f"node failed: {proc.stderr.strip()[-200:]}"
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Exclusion:
    file: str
    reason: str
    line: int = 0
    match: str = ""
    """Text of the change ("buffer_mb", "constant 25"): empty matches every perturbation of the line or file."""
    code: str = ""
    """Text the perturbed line holds ("SHAPE = dict("): survives edits above it, where a line number does not."""

    def covers(self, m: Mutant) -> bool:
        if m.file != self.file or self.line not in (0, m.line) or self.match not in m.change:
            return False
        return not self.code or self.code in _source_line(m.file, m.line)


def _source_line(rel: str, line: int) -> str:
    lines = (REPO / rel).read_text(encoding="utf-8").splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def exclusions(path: Path = CONFIG) -> list[Exclusion]:
    if not path.exists():
        return []
    with path.open("rb") as f:
        return [Exclusion(**e) for e in tomllib.load(f).get("exclude", [])]


def plan_page(all_pages: list[PageSpec], path: Path = CONFIG) -> PageSpec | None:
    """The Plan page: no placeholder, it shows what `distlab plan --json` answers to its requests (gen/plan_page.py)
    in the reader's browser; the claims that guard those numbers are the planner chapters' (guard-audit.toml)."""
    if not path.exists():
        return None
    with path.open("rb") as f:
        conf = tomllib.load(f).get("plan_page")
    if not conf:
        return None
    vectors = _gen_names(PLAN_SCRIPT, ("CUSTOM_SHAPE", "PLAN_VECTORS"))["PLAN_VECTORS"]
    guards = [e for p in all_pages if p.path in conf["guarded_by"] for e in p.experiments]
    shown = tuple(f"{PLAN}.{name}" for name, _, _ in vectors)
    return PageSpec(conf["page"], shown, tuple(dict.fromkeys([PLAN, *guards])))


# ---------------------------------------------------------------- the audit
def audited_files() -> set[str]:
    """The modules above core whose code can move a page's number: the formula modules and the experiments'
    own modules (their arithmetic, e.g. a threshold doubled for a causal mask), not the process launcher."""
    return {
        str(path)
        for path in sources.source_files()
        if not sources.module_name(path).startswith((CORE + ".", "distlab.runtime."))
    }


def scopes(path: Path) -> dict[int, tuple | None]:
    """Node index -> the (file, first line, name) of the innermost function holding it (None: module level)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = _parents(tree)
    out: dict[int, tuple | None] = {}
    for i, node in enumerate(ast.walk(tree)):
        p = parents.get(node)
        while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            p = parents.get(p)
        out[i] = None if p is None else (str(path), _first_line(p), p.name)
    return out


@dataclass
class Outcome:
    mutant: Mutant
    page: str
    status: str
    """guarded | escaped | raised"""
    moved: list[tuple[str, str, str]] = field(default_factory=list)
    detail: str = ""


def _where_differs(a: str, b: str, width: int = 50) -> str:
    """`old -> new` around their first difference: a long table or JSON text shows where it changed."""
    a, b = " ".join(a.split()), " ".join(b.split())
    if len(a) <= width and len(b) <= width:
        return f"{a} -> {b}"
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, i - 20)
    lead = "..." if start else ""
    return f"{lead}{a[start : start + width]}... -> {lead}{b[start : start + width]}..."


def _short(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def changed_files(base: str) -> set[str]:
    """Files a branch changed against `base` (git diff base...HEAD, plus uncommitted changes)."""
    out = set()
    for args in (["diff", "--name-only", f"{base}...HEAD"], ["diff", "--name-only", "HEAD"]):
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
        if proc.returncode:
            raise SystemExit(f"guard-audit: git {' '.join(args)} failed: {proc.stderr.strip()}")
        out |= set(proc.stdout.split())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="guard-audit", description=__doc__.split("\n")[0])
    ap.add_argument("--page", action="append", default=[], help="audit only this page (docs-relative; repeatable)")
    ap.add_argument("--file", action="append", default=[], help="perturb only this file (repo-relative; repeatable)")
    ap.add_argument("--changed", metavar="BASE", help="audit only what a branch changed against BASE (git)")
    ap.add_argument("--jobs", type=int, default=MAX_JOBS, help=f"parallel children (at most {MAX_JOBS})")
    ap.add_argument("--cap", type=float, default=10.0, help="seconds: experiments slower than this are not re-run")
    ap.add_argument("--limit", type=int, default=0, help="stop after this many perturbations (development)")
    ap.add_argument("--skip", type=int, default=0, help="leave out the first N perturbations (resume a long audit)")
    ap.add_argument("--budget", type=float, default=0, help="seconds: start no perturbation after this (CI); 0: none")
    ap.add_argument("--list", action="store_true", help="print how many perturbations each file gets, run none")
    args = ap.parse_args(argv)
    jobs = max(1, min(args.jobs, MAX_JOBS))
    started = time.monotonic()
    files = set(args.file)
    all_pages = pages()
    plan = plan_page(all_pages)
    all_pages += [plan] if plan else []
    chosen = [p for p in all_pages if not args.page or p.path in args.page]
    if args.page and not chosen:
        print(f"guard-audit: no page {args.page} with placeholders", file=sys.stderr)
        return 2
    if args.changed is not None:
        changed = changed_files(args.changed)
        files = {f for f in changed if f.endswith((".py", ".toml", ".js"))} if not files else files & changed
        chosen = [p for p in chosen if _touched(p, files)]
        if not files or not chosen:
            print(f"guard-audit: nothing to audit (no page's experiments import a file changed against {args.changed})")
            print("guard-audit: 0/0 guarded")
            return 0
    _preload()
    formula = audited_files()
    shown: dict[str, list[str]] = {}
    for p in chosen:
        for text in p.placeholders:
            exp = placeholder_experiment(text)
            lst = shown.setdefault(exp or "", [])
            if text not in lst:
                lst.append(text)
    names = list(dict.fromkeys(e for p in chosen for e in p.experiments))

    # 1. baseline: every experiment once here (it warms torch for the children and times it), then once in a child
    # that notes what it calls and reads; a number that differs between the two runs is noise, never compared
    _progress(f"baseline: {len(names)} experiments of {len(chosen)} pages")
    base: dict[str, Run] = {}
    first: dict[str, dict[str, str]] = {}
    noisy: set[str] = set()
    capped: dict[str, str] = {}
    for name in names:
        t0 = time.perf_counter()
        try:
            first[name] = _execute(name, shown.get(name, []))[1]
        except Exception as exc:  # noqa: BLE001
            capped[name] = f"its baseline raises {type(exc).__name__}: {exc}"
            continue
        seconds = time.perf_counter() - t0
        if seconds > args.cap:
            capped[name] = f"baseline {seconds:.0f} s > cap {args.cap:.0f} s"
        _progress(f"  {name}: {seconds:.1f} s")

    def baseline(name: str) -> None:
        status, runs = fork_call(_child, ([name], shown, None, True, formula), 300)
        run = runs[name] if status == "ok" else Run(error=f"{status}: {runs}")
        if run.error or run.failed:
            capped[name] = f"its baseline fails ({run.error or run.failed[0]})"
        noisy.update(k for k, v in run.rendered.items() if first[name].get(k) != v)
        base[name] = run

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(baseline, [n for n in names if n not in capped]))
    base[""] = fork_call(_child, ([], shown, None, False, formula), 60)[1][""]
    live = [n for n in names if n not in capped]

    # 2. perturbations that reach code or data a page's experiments executed or read
    todo: list[tuple[Mutant, list[str]]] = []
    code_files = sorted({f for n in live for f in base[n].modules})
    for f in code_files:
        rel = Path(f).relative_to(REPO).as_posix()
        if files and rel not in files:
            continue
        where = scopes(Path(f))
        for m in code_mutants(Path(f)):
            scope = where[m.op[1]]
            runs = [n for n in live if (scope in base[n].covered if scope else f in base[n].modules)]
            if runs:
                todo.append((m, runs))
    read_paths = sorted({r for n in live for r in base[n].reads}, key=str)
    fact_paths = {tuple(_fact_path(t)) for t in shown.get("", [])}
    for path in sorted(set(read_paths) | fact_paths, key=str):
        if files and f"distlab/data/{path[0]}.toml" not in files:
            continue
        try:
            ms = data_mutants(path)
        except (KeyError, IndexError, TypeError):
            continue
        runs = [n for n in live if path in base[n].reads]
        todo += [(m, runs) for m in ms]
    excluded = exclusions()
    skipped = [m for m, _ in todo if any(e.covers(m) for e in excluded)]
    todo = [(m, r) for m, r in todo if not any(e.covers(m) for e in excluded)]
    js = [(rel, page, check) for rel, (page, check) in JS_FILES.items() if any(p.path == page for p in chosen)]
    js = [(rel, page, check) for rel, page, check in js if not files or rel in files]
    js_todo = [
        (m, page, check) for rel, page, check in js for m in js_mutants(rel) if not any(e.covers(m) for e in excluded)
    ]
    if args.skip:  # the order is stable, so a long audit resumes where its budget stopped it
        todo = todo[args.skip :]
    if args.limit:
        todo = todo[: args.limit]
        js_todo = js_todo[: args.limit]
    total = len(todo) + len(js_todo)
    _progress(f"{total} perturbations to run ({len(skipped)} excluded by {CONFIG.name})")
    if args.list:  # a plan to split a long audit by file: the baseline ran, no perturbation does
        for f, n in Counter([m.file for m, _ in todo] + [m.file for m, _, _ in js_todo]).most_common():
            print(f"{n:6d}  {f}")
        return 0

    # 3. each perturbation alone
    outcomes: list[Outcome] = []
    done = [0]

    unrun: list[Mutant] = []

    def one(item: tuple[Mutant, list[str]]) -> None:
        m, runs = item
        if args.budget and time.monotonic() - started > args.budget:
            unrun.append(m)
            return
        budget = sum(max(10.0, 4 * base[n].seconds) for n in runs) + 10
        t0 = time.monotonic()
        status, answer = fork_call(_child, (runs, shown, m, False, formula), budget)
        got = answer if status == "ok" else {n: Run(error=f"{status}: {answer}") for n in runs} | {"": base[""]}
        found = _judge(m, runs, got, base, noisy, chosen)
        if any(o.status == "escaped" for o in found) and _confirm_noise(
            m, runs, found, got, base, noisy, shown, formula
        ):
            found = _judge(m, runs, got, base, noisy, chosen)
        outcomes.extend(found)
        for o in found:
            if o.status == "escaped":  # as found: a long run that is stopped still leaves its escapes
                _progress(f"escaped: {_escape_line(o)}")
        done[0] += 1
        verdict = ", ".join(f"{o.page} {o.status}" for o in found) or "no page moved"
        _progress(f"[{done[0]}/{total}] {m.key}: {verdict} ({time.monotonic() - t0:.1f} s)")

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, todo))
    if js_todo:
        outcomes += _audit_js(js_todo, done, total)

    # 4. report
    escaped = [o for o in outcomes if o.status == "escaped"]
    guarded = [o for o in outcomes if o.status == "guarded"]
    raised = [o for o in outcomes if o.status == "raised"]
    for o in sorted(escaped, key=lambda o: (o.page, o.mutant.file, o.mutant.line)):
        print(f"escaped: {_escape_line(o)}")
    for name, why in sorted(capped.items()):
        print(f"not run per perturbation: {name} ({why})")
    measured = sorted(n for n in live if n != PLAN and experiments.spec(n).kind == "measured")
    if measured:
        print(
            f"measured experiments limited to their formula side ({len(noisy)} noisy numbers not compared; ranks run "
            f"unperturbed source): {', '.join(measured)}"
        )
    if unrun:
        print(f"budget of {args.budget:.0f} s reached: {len(unrun)} of {total} perturbations not run")
    print(
        f"perturbations: {total - len(unrun)} run, {len(skipped)} excluded; page outcomes: {len(guarded)} guarded, "
        f"{len(escaped)} escaped, {len(raised)} stopped the build with an exception (not counted); "
        f"{time.monotonic() - started:.0f} s"
    )
    print(f"guard-audit: {len(guarded)}/{len(guarded) + len(escaped)} guarded")
    return 0 if not escaped else 1


def _confirm_noise(
    m: Mutant, runs: list[str], found: list, got: dict, base: dict, noisy: set, shown: dict, formula: set
) -> bool:
    """Before an escape in a measured experiment counts, it must reproduce: its experiments run once more unperturbed
    and once more perturbed. Two baseline runs can print the same timing by chance (1.02 s twice); a number that the
    extra unperturbed run moves, or that the perturbation does not move the same way twice, is noise, not an escape.
    Adds what is noise to `noisy`; True when anything was."""
    moved = {placeholder_experiment(t) for o in found if o.status == "escaped" for t, _, _ in o.moved}
    measured = [n for n in runs if n in moved and n != PLAN and experiments.spec(n).kind == "measured"]
    if not measured:
        return False
    budget = sum(max(10.0, 4 * base[n].seconds) for n in measured) + 10
    fresh: set[str] = set()
    for op, reference in ((None, base), (m, got)):
        status, again = fork_call(_child, (measured, shown, op, False, formula), budget)
        if status != "ok":
            continue
        fresh |= {t for n in measured for t, v in again[n].rendered.items() if reference[n].rendered.get(t) != v}
    noisy.update(fresh)
    return bool(fresh)


def _escape_line(o: Outcome) -> str:
    moved = "; ".join(f"{_short(k, 40)}: {_where_differs(a, b)}" for k, a, b in o.moved[:3])
    more = f" (+{len(o.moved) - 3} more)" if len(o.moved) > 3 else ""
    return f"{o.mutant.file}:{o.mutant.line}: {o.mutant.change} | page {o.page} | moved: {moved}{more}"


def _fact_path(text: str) -> list:
    name, entry, fld = text.partition(" ")[2].strip().split(".", 2)
    return [name, entry, fld]


def _touched(page: PageSpec, files: set[str]) -> bool:
    for name in page.experiments:
        try:
            deps = experiments.code_files(experiments.spec(name).module)
        except experiments.UnknownExperiment:
            continue
        if any(p.relative_to(REPO).as_posix() in files for p in deps):
            return True
    if any(f"distlab/data/{_fact_path(t)[0]}.toml" in files for t in page.placeholders if t.startswith("fact ")):
        return True
    return any(page.path == p and rel in files for rel, (p, _) in JS_FILES.items())


def _judge(m: Mutant, runs: list[str], got: dict, base: dict, noisy: set, chosen: list[PageSpec]) -> list[Outcome]:
    out = []
    fact = tuple(m.op[1]) if m.op[0] == "data" else None
    for page in chosen:
        mine = [n for n in page.experiments if n in runs]
        facts_here = [t for t in page.placeholders if t.startswith("fact ") and fact and tuple(_fact_path(t)) == fact]
        if not mine and not facts_here:
            continue
        moved = []
        for text in page.placeholders:
            exp = placeholder_experiment(text)
            if text in noisy or (exp not in mine and text not in facts_here):
                continue
            before = base[exp or ""].rendered.get(text)
            after = got.get(exp or "", Run()).rendered.get(text) if exp else _fact_after(text, m)
            if after is not None and after != before:
                moved.append((text, before or "", after))
        errors = [f"{n}: {got[n].error}" for n in mine if got.get(n) and got[n].error]
        failed = [f"{n}: {c}" for n in mine for c in (got[n].failed if got.get(n) else [])]
        lost = [text for text, _, after in moved if after.startswith("(cannot render")]
        if not failed and (errors or lost):  # the page's build stops: an exception, or a placeholder gone
            out.append(Outcome(m, page.path, "raised", moved, errors[0] if errors else f"{lost[0]}: not rendered"))
        elif moved:
            out.append(Outcome(m, page.path, "guarded" if failed else "escaped", moved, failed[0] if failed else ""))
    return out


def _fact_after(text: str, m: Mutant) -> str:
    f = facts.fact(text.partition(" ")[2].strip())
    return f"{m.op[2]!r} {f.unit}"


def _audit_js(todo: list, done: list, total: int) -> list[Outcome]:
    out = []
    checks: dict[str, dict] = {}
    baselines: dict[str, list | str] = {}
    for m, page, check in todo:
        if check not in checks:  # the gen script's own data and vectors (its imports: core imports no topic)
            ns = checks[check] = _gen_check(check)
            ns["DATA"], ns["VECTORS"] = ns["site_data"](), ns["vectors"]()
        ns = checks[check]
        data, vecs = ns["DATA"], ns["VECTORS"]
        text = (REPO / m.file).read_text(encoding="utf-8")
        if m.file not in baselines:
            baselines[m.file] = js_outputs(text, ns["RUNNER"], data, vecs)
        _, at, old, new = m.op
        t0 = time.monotonic()
        got = js_outputs(text[:at] + new + text[at + len(old) :], ns["RUNNER"], data, vecs)
        done[0] += 1
        if got == baselines[m.file]:
            verdict = "no page moved"
        elif isinstance(got, str):
            out.append(Outcome(m, page, "raised", [], got))
            verdict = f"{page} raised"
        else:
            bad = ns["disagreements"](vecs, got)
            moved = [
                (f"vector {i}", json.dumps(a)[:60], json.dumps(b)[:60])
                for i, (a, b) in enumerate(zip(baselines[m.file], got))
                if a != b
            ]
            out.append(Outcome(m, page, "guarded" if bad else "escaped", moved, bad[0] if bad else ""))
            verdict = f"{page} {'guarded' if bad else 'escaped'}"
        _progress(f"[{done[0]}/{total}] {m.key}: {verdict} ({time.monotonic() - t0:.1f} s)")
    return out


def _preload() -> None:
    """Import the heavy libraries once, before any fork (each child then starts in milliseconds)."""
    for name in ("numpy", "torch", "matplotlib", "matplotlib.pyplot", "mkdocs.exceptions"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if "torch" in sys.modules:  # one thread: two children share the two cores, and a fork never copies a pool
        sys.modules["torch"].set_num_threads(1)
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        pass


def _progress(text: str) -> None:
    print(f"guard-audit: {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
