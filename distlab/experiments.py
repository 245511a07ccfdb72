"""The experiment registry, its cache and provenance.

An experiment is a plain function `fn(device: str) -> Result`, registered with `@experiment(...)`.
`distlab list` finds experiments by reading the source (no import of torch or triton); running one
imports only its module. Results are cached under a key made of the experiment's code (its module
and every distlab module it imports, transitively), its device and the torch version: an unchanged
rebuild re-runs nothing, and a changed experiment never reuses an old result.
"""

from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import importlib
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from distlab.results import Result

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    module: str
    kind: str = "measured"  # measured | simulated | computed
    fn: Callable[[str], Result] | None = None


_REGISTRY: dict[str, Experiment] = {}


def experiment(name: str, description: str, *, kind: str = "measured"):
    """Register `fn(device) -> Result` under `name` (the name readers type after `distlab run`)."""
    if kind not in ("measured", "simulated", "computed"):
        raise ValueError(f"experiment {name!r}: kind must be measured, simulated or computed")

    def register(fn):
        _REGISTRY[name] = Experiment(name, description, fn.__module__, kind, fn)
        return fn

    return register


class UnknownExperiment(LookupError):
    pass


def discover() -> dict[str, Experiment]:
    """Every `@experiment("name", "description")` in distlab's source, found without importing it."""
    found: dict[str, Experiment] = {}
    for path in sorted(PACKAGE_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and getattr(deco.func, "id", None) == "experiment"
                    and len(deco.args) >= 2
                ):
                    name, desc = (ast.literal_eval(a) for a in deco.args[:2])
                    kind = next((ast.literal_eval(k.value) for k in deco.keywords if k.arg == "kind"), "measured")
                    found[name] = Experiment(name, desc, f"distlab.{path.stem}", kind)
    return found


def get(name: str) -> Experiment:
    if name not in _REGISTRY:
        known = discover()
        if name not in known:
            raise UnknownExperiment(f"unknown experiment {name!r}; known: {', '.join(sorted(known))}")
        importlib.import_module(known[name].module)
    return _REGISTRY[name]


# ---------------------------------------------------------------- code identity
def _local_imports(module: str) -> set[str]:
    path = PACKAGE_DIR / (module.split(".", 1)[1] + ".py")
    if not path.exists():
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y / from . import x
                base = "distlab" + ("." + base if base else "")
            if base == "distlab":
                names |= {f"distlab.{a.name}" for a in node.names}
            elif base.startswith("distlab."):
                names.add(base)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("distlab.")}
    return {n for n in names if (PACKAGE_DIR / (n.split(".", 1)[1] + ".py")).exists()}


def code_files(module: str) -> list[Path]:
    """The source files an experiment's result depends on: its module, what it imports from
    distlab (transitively), and the data files when it reads facts."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += _local_imports(m)
    files = [PACKAGE_DIR / (m.split(".", 1)[1] + ".py") for m in sorted(seen)]
    if "distlab.facts" in seen:
        files += sorted((PACKAGE_DIR / "data").glob("*.toml"))
    return [f for f in files if f.exists()]


def code_hash(name: str) -> str:
    exp = get(name)
    h = hashlib.sha256()
    if exp.module.startswith("distlab."):
        files = code_files(exp.module)
    else:  # an experiment defined outside the package (a test, a reader's script): its own file
        import inspect

        files = [Path(inspect.getsourcefile(exp.fn))]
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- provenance
def hardware(device: str) -> str:
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
    return hardware_slug_of(hardware(device))


def hardware_slug_of(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the folder name under results/."""
    return "".join(c if c.isalnum() else "-" for c in name.split(" (")[0].lower()).strip("-")


def git_version() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_DIR, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "distlab"], cwd=REPO_DIR,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha or "unversioned") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unversioned"


def provenance(name: str, device: str, seconds: float) -> dict:
    import torch

    return {
        "experiment": name,
        "device": device,
        "hardware": hardware(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "code_hash": code_hash(name),
        "code_version": git_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
        "seconds": round(seconds, 2),
    }


# ---------------------------------------------------------------- cache and stored results
def cache_dir() -> Path:
    return Path(os.environ.get("DISTLAB_CACHE", REPO_DIR / ".cache" / "distlab"))


def results_dir() -> Path:
    """Stored measurements from GPU machines, committed: results/<hardware>/<experiment>.json."""
    return Path(os.environ.get("DISTLAB_RESULTS", REPO_DIR / "results"))


def _cache_key(name: str, device: str) -> str:
    import torch

    # Stored GPU results are inputs too: a page that draws them must rebuild when they change.
    stored_hash = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(results_dir().glob(f"*/{name}.json"))))
    raw = json.dumps([name, code_hash(name), device, torch.__version__, hardware(device), stored_hash.hexdigest()])
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


def run(name: str, device: str = "cpu", *, use_cache: bool = True) -> tuple[Result, bool]:
    """Run an experiment (or take it from the cache). Returns (result, came_from_cache)."""
    exp = get(name)
    check_device(device)
    path = cache_dir() / f"{name}-{device}-{_cache_key(name, device)}.json"
    if use_cache and path.exists():
        return load(path), True
    start = time.perf_counter()
    result = exp.fn(device)
    result.name, result.kind = name, exp.kind
    result.provenance = provenance(name, device, time.perf_counter() - start)
    if use_cache:
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
