"""What distlab's source files register and import, read without importing them.

`distlab list`, the CLI's command table and every cache key need to know which experiments and commands
each module defines and which distlab modules it imports. Parsing ~130 files costs a quarter of a second, so
the answers are kept in a small index (`sources.json` in the cache folder), keyed by each file's modification
time and size: a warm start stats the files and reads the index, and parses only what changed.
"""

from __future__ import annotations

import ast
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # distlab/
REPO_DIR = PACKAGE_DIR.parent
INDEX_VERSION = 1  # bump when what a scan records changes


def cache_dir() -> Path:
    """Where results and the source index are cached (DISTLAB_CACHE, default .cache/distlab/)."""
    return Path(os.environ.get("DISTLAB_CACHE", REPO_DIR / ".cache" / "distlab"))


@dataclass(frozen=True)
class Registration:
    """One `@experiment(...)` or `@command(...)` decorator, as written in the source."""

    decorator: str
    """"experiment" or "command"."""
    name: str
    description: str
    line: int
    """Line of the decorated function (its first decorator)."""
    options: tuple[tuple[str, object], ...] = ()
    """The decorator's keyword arguments (kind, versions), as literals."""

    def option(self, key: str, default=None):
        return dict(self.options).get(key, default)


@dataclass(frozen=True)
class Scan:
    registrations: tuple[Registration, ...]
    imports: frozenset[str]
    """distlab modules (and packages) this file imports, at any depth of the file."""


def module_name(path: Path) -> str:
    """distlab/memory/adamw_bytes.py -> distlab.memory.adamw_bytes"""
    return ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)


def module_path(module: str) -> Path:
    """distlab.memory.adamw_bytes -> distlab/memory/adamw_bytes.py"""
    return PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_files() -> list[Path]:
    """Every module of the package (sorted; topic folders included)."""
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if p.name != "__init__.py")


def parse(path: Path) -> Scan:
    """Read one file's registrations and distlab imports from its syntax tree."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path)
    found, names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                kind = getattr(getattr(deco, "func", None), "id", None)
                if isinstance(deco, ast.Call) and kind in ("experiment", "command") and len(deco.args) >= 2:
                    name, desc = (ast.literal_eval(a) for a in deco.args[:2])
                    if any(k.arg is None for k in deco.keywords):
                        raise ValueError(
                            f"{path}:{deco.lineno}: @{kind}(...) with **options cannot be read without importing "
                            "the module; write its keyword arguments out"
                        )
                    options = tuple((str(k.arg), ast.literal_eval(k.value)) for k in deco.keywords)
                    line = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    found.append(Registration(kind, name, desc, line, options))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y / from . import x
                parent = here.rsplit(".", node.level)[0]
                base = parent + ("." + base if base else "")
            if base == "distlab" or base.startswith("distlab."):
                # `from distlab.memory import activations` names a module; `from distlab.memory.activations
                # import f` names its module; both count.
                names |= {f"{base}.{a.name}" for a in node.names} | {base}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("distlab.")}
    return Scan(tuple(found), frozenset(names))


# ---------------------------------------------------------------- the index
_index: dict[str, dict] | None = None
_dirty = False


def _index_path() -> Path:
    return cache_dir() / "sources.json"


def _load_index() -> dict[str, dict]:
    global _index
    if _index is None:
        try:
            raw = json.loads(_index_path().read_text())
            _index = raw["files"] if raw.get("version") == INDEX_VERSION else {}
        except (OSError, ValueError, KeyError, TypeError):
            _index = {}
    return _index


def _encode(scan: Scan) -> dict:
    return {
        "registrations": [
            [r.decorator, r.name, r.description, r.line, [list(o) for o in r.options]] for r in scan.registrations
        ],
        "imports": sorted(scan.imports),
    }


def _decode(entry: dict) -> Scan:
    regs = tuple(
        Registration(d, n, desc, line, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in opts))
        for d, n, desc, line, opts in entry["registrations"]
    )
    return Scan(regs, frozenset(entry["imports"]))


def scan(path: Path) -> Scan:
    """What one source file registers and imports: from the index while the file is unchanged, else parsed."""
    global _dirty
    stat = path.stat()
    key = str(path.relative_to(PACKAGE_DIR))
    index = _load_index()
    entry = index.get(key)
    if entry and entry["mtime_ns"] == stat.st_mtime_ns and entry["size"] == stat.st_size:
        return _cached_decode(key, stat.st_mtime_ns, stat.st_size)
    result = parse(path)
    index[key] = {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size} | _encode(result)
    _dirty = True
    return result


@functools.lru_cache(maxsize=1024)
def _cached_decode(key: str, mtime_ns: int, size: int) -> Scan:
    return _decode(_load_index()[key])


def save_index() -> None:
    """Write the index if a scan parsed anything new (atomically; a read-only cache folder is left alone)."""
    global _dirty
    if not _dirty or _index is None:
        return
    path = _index_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": INDEX_VERSION, "files": _index}, sort_keys=True))
        tmp.replace(path)
        _dirty = False
    except OSError:
        pass


def registrations(decorator: str) -> list[tuple[Path, Registration]]:
    """Every `@experiment` or `@command` in the package, with its file, in file order."""
    found = [(p, r) for p in source_files() for r in scan(p).registrations if r.decorator == decorator]
    save_index()
    return found
