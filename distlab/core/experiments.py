"""The experiment registry, its cache and provenance.

An experiment is a plain function `fn(device: str) -> Result`, registered with `@experiment(...)`.
`distlab list` finds experiments by reading the source (no import of torch or triton); running one
imports only its module. Results are cached under a key made of the experiment's code (its module
and every distlab module it imports, transitively), its device and the torch version: an unchanged
rebuild re-runs nothing, and a changed experiment never reuses an old result.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from distlab.core import sources
from distlab.core.results import RESULT_SCHEMA, Result

PACKAGE_DIR, REPO_DIR, cache_dir = sources.PACKAGE_DIR, sources.REPO_DIR, sources.cache_dir
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    module: str
    kind: str = "measured"  # measured | simulated | computed
    fn: Callable[[str], Result] | None = None
    line: int = 0
    """Line of the experiment's function in its module (for `distlab list` and the pages' source links)."""
    versions: tuple[str, ...] = ()
    """Packages besides torch whose version the result depends on (a compiler's output): part of the cache key."""

    @property
    def function(self) -> Callable[[str], Result]:
        """The registered function. A registration read from the source (discover()) has none until its module
        is imported: get() imports it."""
        if self.fn is None:
            raise RuntimeError(f"experiment {self.name!r}: its module {self.module} is not imported (use get())")
        return self.fn

    @property
    def source(self) -> str:
        """`distlab/memory/adamw_bytes.py:42`: where a reader finds the code behind a number."""
        return f"{_module_path(self.module).relative_to(REPO_DIR).as_posix()}:{self.line}"


_REGISTRY: dict[str, Experiment] = {}


def experiment(name: str, description: str, *, kind: str = "measured", versions: tuple[str, ...] = ()):
    """Register `fn(device) -> Result` under `name` (the name readers type after `distlab run`). `versions`
    names packages whose upgrade must re-run it (e.g. ("triton",) for what the compiler makes of a kernel)."""
    if kind not in ("measured", "simulated", "computed"):
        raise ValueError(f"experiment {name!r}: kind must be measured, simulated or computed")

    def register(fn):
        _REGISTRY[name] = Experiment(name, description, fn.__module__, kind, fn, _line_of(name, fn), tuple(versions))
        return fn

    return register


def _line_of(name: str, fn) -> int:
    """The decorator's line, as the source scan reads it (a wrapped fn's own code object would name the wrapper's
    line in another file: one_core's, single_threaded's)."""
    path = sources.module_path(fn.__module__) if fn.__module__.startswith("distlab.") else None
    if path is not None and path.exists():
        for reg in sources.scan(path).registrations:
            if reg.decorator == "experiment" and reg.name == name:
                return reg.line
    return getattr(getattr(fn, "__code__", None), "co_firstlineno", 0)


class UnknownExperiment(LookupError):
    pass


def discover() -> dict[str, Experiment]:
    """Every `@experiment("name", "description")` in distlab's source, found without importing it."""
    found: dict[str, Experiment] = {}
    for path, reg in sources.registrations("experiment"):
        found[reg.name] = Experiment(
            reg.name,
            reg.description,
            sources.module_name(path),
            reg.option("kind", "measured"),
            line=reg.line,
            versions=tuple(reg.option("versions", ())),
        )
    return found


_ONE_SCAN: dict[str, Experiment] | None = None  # inside one_scan(): the registrations scanned at its start


@contextlib.contextmanager
def one_scan():
    """Look experiments up in one scan of the sources for the duration (a site build): without it every lookup
    rescans, and a warm build's 500 lookups cost about 2 s of its 7. Not process-wide: `mkdocs serve` rebuilds
    in one process after the sources change."""
    global _ONE_SCAN
    _ONE_SCAN = discover()
    try:
        yield
    finally:
        _ONE_SCAN = None


def spec(name: str) -> Experiment:
    """The experiment's registration, without importing its module when it has not been imported yet."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    known = _ONE_SCAN if _ONE_SCAN is not None and name in _ONE_SCAN else discover()
    if name not in known:
        raise UnknownExperiment(f"unknown experiment {name!r}; known: {', '.join(sorted(known))}")
    return known[name]


def get(name: str) -> Experiment:
    """The experiment with its function (imports its module)."""
    if name not in _REGISTRY:
        importlib.import_module(spec(name).module)
    return _REGISTRY[name]


# ---------------------------------------------------------------- code identity
def _module_path(module: str) -> Path:
    return sources.module_path(module)


# The machinery every experiment imports, which says how results are kept and shown, not what they are: the
# registry and cache (this module), the Result types (versioned by RESULT_SCHEMA instead), number formatting,
# the site and the CLI. Editing them must not invalidate cached results or mark stored GPU measurements stale.
MACHINERY_MODULES = frozenset(
    {
        "distlab.core.experiments",
        "distlab.core.results",
        "distlab.core.formatting",
        "distlab.core.site",
        "distlab.core.cli",
    }
)


def code_files(module: str) -> list[Path]:
    """The source files an experiment's result depends on: its module, what it imports from distlab
    (transitively, the machinery aside), and the data files when it reads facts."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen or m in MACHINERY_MODULES or not _module_path(m).exists():
            continue
        seen.add(m)
        todo += sources.scan(_module_path(m)).imports
    files = [_module_path(m) for m in sorted(seen)]
    if "distlab.core.facts" in seen:
        files += sorted((PACKAGE_DIR / "data").glob("*.toml"))
    return files


def code_hash(name: str) -> str:
    """What a result's identity is made of: the text of its code and data, and the Result format's version."""
    exp = spec(name)
    h = hashlib.sha256(f"result schema {RESULT_SCHEMA}\0".encode())
    if exp.module.startswith("distlab."):
        files = code_files(exp.module)
    else:  # an experiment defined outside the package (a test, a reader's script): its own file
        import inspect

        source_file = inspect.getsourcefile(exp.function)
        if source_file is None:
            raise RuntimeError(f"experiment {name!r}: no source file for {exp.module}, so no cache key")
        files = [Path(source_file)]
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- provenance
@functools.cache
def device_name(device: str) -> str:
    """The machine a result was measured on, as provenance names it: the GPU's name, or the CPU model and cores."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


def hardware_slug(device: str) -> str:
    return hardware_slug_of(device_name(device))


def hardware_slug_of(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the folder name under results/."""
    return "".join(c if c.isalnum() else "-" for c in name.split(" (")[0].lower()).strip("-")


def git_version() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "distlab"], cwd=REPO_DIR, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        return (sha or "unversioned") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unversioned"


def provenance(name: str, device: str, seconds: float) -> dict:
    import torch

    return {
        "experiment": name,
        "device": device,
        "hardware": device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "code_hash": code_hash(name),
        "code_version": git_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
        "seconds": round(seconds, 2),
    }


# ---------------------------------------------------------------- cache and stored results
def results_dir() -> Path:
    """Stored measurements from GPU machines, committed: results/<hardware>/<experiment>.json."""
    return Path(os.environ.get("DISTLAB_RESULTS", REPO_DIR / "results"))


@functools.cache
def package_version(name: str = "torch") -> str:
    """A package's installed version without importing it (a warm build imports no experiment code)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _cache_key(name: str, device: str) -> str:
    # Stored GPU results are not inputs: experiments never read them; the page layer shows them beside.
    versions = [package_version(p) for p in ("torch", *spec(name).versions)]
    raw = json.dumps([name, code_hash(name), device, versions, device_name(device)])
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def save(result: Result, folder: Path, stem: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for fig_name, fig in result.figures.items():
        (folder / f"{stem}--{fig_name}.png").write_bytes(fig.png)
    path = folder / f"{stem}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def load(path: Path) -> Result:
    obj = json.loads(path.read_text())
    figs = {k: (path.parent / f"{path.stem}--{k}.png").read_bytes() for k in obj["figures"]}
    return Result.from_json(obj, figs)


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda asked for, but no CUDA GPU is visible to torch")


TIMING_ATTEMPTS = 3  # fresh runs an experiment gets when only timing claims failed


def cache_path(name: str, device: str = "cpu") -> Path:
    return cache_dir() / f"{name}-{device}-{_cache_key(name, device)}.json"


def run(name: str, device: str = "cpu", *, use_cache: bool = True) -> tuple[Result, bool]:
    """Run an experiment (or take it from the cache). Returns (result, came_from_cache).

    When only timing claims fail, the experiment is measured again on fresh runs, up to TIMING_ATTEMPTS
    in all, and the first run whose claims all hold is kept: noise must not fail a build, and a wrong
    formula (a value claim) fails at once. A result with a failed claim is never cached, so the next
    build measures again instead of repeating the failure."""
    check_device(device)
    path = cache_path(name, device)
    if use_cache and path.exists():
        return load(path), True
    exp = get(name)
    for attempt in range(1, TIMING_ATTEMPTS + 1):
        start = time.perf_counter()
        result = exp.function(device)
        result.name, result.kind = name, exp.kind
        result.provenance = provenance(name, device, time.perf_counter() - start)
        failed = result.failed_claims
        if not failed or any(c.kind != "timing" for c in failed) or attempt == TIMING_ATTEMPTS:
            break
        print(
            f"distlab: {name}: timing claim {failed[0].name!r} did not hold ({failed[0].describe()}); "
            f"measuring again ({attempt + 1}/{TIMING_ATTEMPTS})",
            file=sys.stderr,
            flush=True,
        )
    result.provenance["attempts"] = attempt
    if use_cache and not result.failed_claims:
        save(result, path.parent, path.stem)
    return result, False


def store(result: Result) -> Path:
    """Keep a (GPU) measurement in results/<hardware>/ so CPU builds can show it."""
    slug = hardware_slug(result.provenance["device"])
    return save(result, results_dir() / slug, result.name)


def stored(name: str) -> list[tuple[Result, bool]]:
    """Stored results for an experiment on every hardware, with a flag: stale (its code changed)."""
    out = []
    current = code_hash(name)
    for path in sorted(results_dir().glob(f"*/{name}.json")):
        r = load(path)
        out.append((r, r.provenance.get("code_hash") != current))
    return out
