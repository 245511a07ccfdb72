"""The Plan page's assets (docs/plan.md, assets/plan.js): the planner itself, run in the reader's browser.

The page runs `distlab plan` in the browser on Pyodide (CPython compiled to WebAssembly): Pyodide's core, installed
by `make setup` from the npm registry with its standard library compiled to bytecode there
(gen/pyodide_compile.mjs), and a bundle of exactly the distlab modules the `plan` and `pipeline` commands import
(pure Python: no numpy, no torch) with the data files, built here. Nothing is fetched from another host. The build
also writes the answers of `distlab plan --json` to a few requests, which tests/site/test_plan_page.py enters into
the live page: the page must show the same plans, in the same order, with the same numbers; and the page's form,
read from the command's own argparse parser.
"""

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import mkdocs_gen_files

from distlab.core import cli, sources

PLAN_COMMANDS = ("plan", "pipeline", "trace")  # what the pages run (the Trace page shares the Plan page's bundle)
PYODIDE_SERVED = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "pyodide-lock.json", "python_stdlib.pyc.zip")
GEN = Path(__file__).resolve().parent
ENTRY = GEN / "plan_entry.py"  # the page's way into distlab.core.cli.main, at the bundle's root
CUSTOM_SHAPE = dict(name="custom-48L", layers=48, hidden=5120, heads=40, kv_heads=8, ffn=13824, vocab=50304, seq=4096)
"""A model nobody publishes (GQA with 5 query heads per KV head, a GPT-2 vocabulary): the page's custom shape."""
# (name, distlab plan's arguments, files the page writes first): what the page must answer as the command line does.
# Flags at their default are left out, as the page leaves them out of the command it shows.
PLAN_VECTORS = tuple(
    (name, args.split(), files)
    for name, args, files in (
        ("7B fine-tune on 8 H100s", "--model 7B --task finetune", {}),
        ("70B pretraining on 64 H100s", "--model 70B --nodes 8", {}),
        (
            "13B, every layout dimension fixed",
            "--model 13B --nodes 2 --tp 4 --pp 2 --dp 2 --zero 1 --micro-batch 1 --recompute selective "
            "--schedule interleaved --virtual 2 --offload none",
            {},
        ),
        ("Mixtral 8x7B (MoE) on 16 H100s, the best 8", "--model Mixtral-8x7B --nodes 2 --top 8", {}),
        (
            "13B on a GB200 NVL72 rack's 16 trays, hybrid-sharded inside the 64-GPU NVLink domain",
            "--model 13B --gpu GB200 --gpus-per-node 4 --nvlink-domain 64 --nodes 16 --zero 3 --dp-shard 16",
            {},
        ),
        (
            "a custom shape on 32 A100s, 4 NICs per node, fp32 gradients, no sequence parallelism",
            "--model model.json --gpu A100-SXM-80GB --nodes 4 --nics-per-node 4 --seq 2048 --global-batch-tokens "
            "2097152 --precision mixed-fp32-grads --offload none --no-sequence-parallel",
            {"model.json": json.dumps(CUSTOM_SHAPE)},
        ),
        ("infeasible: 70B on one H100 without offload", "--model 70B --gpus-per-node 1 --offload none", {}),
        ("refused: expert parallelism for a dense model", "--model 7B --ep 2", {}),
    )
)

pyodide = Path(os.environ.get("DISTLAB_PYODIDE_DIR", Path(sys.prefix) / "share" / "pyodide"))
if not all((pyodide / name).exists() for name in PYODIDE_SERVED):
    from mkdocs.exceptions import PluginError

    raise PluginError(
        f"Pyodide not found in {pyodide}: run `make setup` (it installs Pyodide from npm and compiles its standard "
        "library), or point DISTLAB_PYODIDE_DIR at such a folder"
    )
for name in PYODIDE_SERVED:
    with mkdocs_gen_files.open(f"assets/pyodide/{name}", "wb") as f:
        f.write((pyodide / name).read_bytes())


def bundle_files() -> dict[str, Path]:
    """Archive name -> file: the modules the page's commands import, followed through every distlab import of
    each (function-level ones too), their packages' __init__ files, every data file, and the entry."""
    known = {sources.module_name(p): p for p in sources.source_files()}
    commands = cli.discover_commands()
    todo, seen = [commands[c][0] for c in PLAN_COMMANDS] + ["distlab.core.cli"], set()
    while todo:
        module = todo.pop()
        if module in known and module not in seen:
            seen.add(module)
            todo += sources.scan(known[module]).imports
    root = sources.PACKAGE_DIR.parent
    files = {known[m].relative_to(root).as_posix(): known[m] for m in seen}
    for rel in list(files):
        for parent in Path(rel).parents:
            if parent.parts and (root / parent / "__init__.py").exists():
                files[(parent / "__init__.py").as_posix()] = root / parent / "__init__.py"
    for toml in sorted((sources.PACKAGE_DIR / "data").glob("*.toml")):
        files[toml.relative_to(root).as_posix()] = toml
    files["plan_entry.py"] = ENTRY
    return dict(sorted(files.items()))


def _zip(entries: dict[str, bytes]) -> bytes:
    """A zip whose bytes depend on its contents only: entries in order, each dated 1980-01-01."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            z.writestr(info, data)
    return buf.getvalue()


# Run with no site-packages (-S) and no environment (-I): only the standard library and the bundle, as in the
# browser. It writes the source index for the bundle's files (so the browser need not parse them) and fails if
# a command is missing or anything reaches for numpy or torch.
INDEX = """
import sys
root = sys.argv[1]
sys.path.insert(0, root)
import plan_entry
plan_entry.prepare(root)
from distlab.core import cli
missing = set(sys.argv[2:]) - set(cli.discover_commands())
assert not missing, f"the bundle lacks the commands {sorted(missing)}"
for name in sys.argv[2:]:
    __import__(cli.discover_commands()[name][0])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "torch", "matplotlib"))
assert not heavy, f"the page's commands import {heavy}"
"""


def build_bundle(files: dict[str, Path]) -> bytes:
    """The zip the page unpacks: sources, data, the entry, the source index, and bytecode compiled by Pyodide."""
    entries = {name: path.read_bytes() for name, path in files.items()}
    with tempfile.TemporaryDirectory(prefix="distlab-plan-") as tmp:
        root = Path(tmp) / "bundle"
        for name, data in entries.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-B", "-c", INDEX, str(root), *PLAN_COMMANDS],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode:
            from mkdocs.exceptions import PluginError

            raise PluginError(f"the Plan page's bundle does not run on its own:\n{proc.stderr[-3000:]}")
        entries["cache/sources.json"] = (root / "cache" / "sources.json").read_bytes()
        source_zip = Path(tmp) / "source.zip"
        source_zip.write_bytes(_zip(entries))
        node = shutil.which(os.environ.get("DISTLAB_NODE", "node"))
        if node is None:
            print(
                "distlab: node not found: the Plan page's bundle is served as source (it starts slower)",
                file=sys.stderr,
            )
            return source_zip.read_bytes()
        compiled = Path(tmp) / "compiled.zip"
        proc = subprocess.run(
            [node, str(GEN / "pyodide_compile.mjs"), "package", str(pyodide), str(source_zip), str(compiled)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode:
            from mkdocs.exceptions import PluginError

            raise PluginError(f"compiling the Plan page's bundle with Pyodide failed:\n{proc.stderr[-3000:]}")
        return compiled.read_bytes()


def plan_vectors() -> list[dict]:
    """`distlab plan ... --json` on each request, run here as the command line runs it (distlab.core.cli.main):
    its exit status, and its plans or its one-line refusal."""
    out = []
    for name, args, files in PLAN_VECTORS:
        argv = ["plan", *args, "--json"]
        stdout, stderr = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory(prefix="distlab-plan-vector-") as tmp:
            for file, text in files.items():
                (Path(tmp) / file).write_text(text)
            here = os.getcwd()
            os.chdir(tmp)  # `--model model.json` is found in the working folder, as on the page
            try:
                with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                    rc = cli.main(argv)
            finally:
                os.chdir(here)
        vector = {"name": name, "argv": argv, "files": files, "rc": rc}
        if rc == 0:
            vector["plans"] = json.loads(stdout.getvalue())
        else:
            vector["stderr"] = stderr.getvalue().strip()
        out.append(vector)
    return out


def plan_form() -> dict:
    """What the page's form offers, read from the command itself: every option of `distlab plan` (its flag,
    kind, choices, default and help, from the argparse parser the command builds), the models, GPUs and links it
    accepts, and the fields of a custom model shape."""
    from distlab.core.facts import entries
    from distlab.hardware.gpus import gpu_names
    from distlab.hardware.links import links
    from distlab.models.shapes import ModelShape, preset
    from distlab.planner import plan_command as command_module
    from distlab.planner.moe import moe_model, moe_names

    built = {}

    class Built(Exception):
        pass

    real = command_module.parser

    def capture(*a, **kw):
        p = built["parser"] = real(*a, **kw)

        def stop(*_, **__):
            raise Built

        p.parse_args = stop
        return p

    command_module.parser = capture
    try:
        command_module.plan_command([])
    except Built:
        pass
    finally:
        command_module.parser = real
    options = []
    for group in built["parser"]._action_groups:
        for a in group._group_actions:
            if a.dest in ("help", "json"):  # the page always asks for --json
                continue
            kind = (
                "switch"
                if isinstance(a, argparse.BooleanOptionalAction)
                else "choice"
                if a.choices
                else getattr(a.type, "__name__", "str")
                if a.type
                else "str"
            )
            options.append(
                {
                    "flag": next(s for s in a.option_strings if s.startswith("--")),
                    "dest": a.dest,
                    "group": group.title,
                    "kind": kind,
                    "default": a.default,
                    "required": a.required,
                    "choices": list(a.choices) if a.choices else None,
                    "help": a.help,
                }
            )
    presets = {}
    for name in entries("models"):
        m = preset(name)
        presets[name] = {
            "name": m.name,
            "params": m.params(),
            "moe": False,
            "shape": {f.name: getattr(m, f.name) for f in dataclasses.fields(ModelShape)},
        }
    for name in moe_names():
        m, _ = moe_model(name)
        presets[name] = {"name": m.name, "params": m.params(), "moe": True, "shape": None}
    shape_fields = [
        {
            "name": f.name,
            "type": str(f.type),
            "default": None if f.default is dataclasses.MISSING else f.default,
            "required": f.default is dataclasses.MISSING,
        }
        for f in dataclasses.fields(ModelShape)
    ]
    return {
        "options": options,
        "models": presets,
        "gpus": gpu_names(),
        "links": links(),
        "shape_fields": shape_fields,
        "custom_model_file": "model.json",
    }


files = bundle_files()
key = hashlib.sha256()
for part in [
    json.dumps(PLAN_VECTORS).encode(),
    (pyodide / "package.json").read_bytes(),
    (GEN / "pyodide_compile.mjs").read_bytes(),
    Path(__file__).read_bytes(),
]:
    key.update(hashlib.sha256(part).digest())
for name, path in files.items():
    key.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
cached = sources.cache_dir() / "plan-page" / key.hexdigest()[:24]
if not (cached / "vectors.json").exists():  # written last: its presence means the folder is complete
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="building-", dir=cached.parent))
    (staging / "distlab.zip").write_bytes(build_bundle(files))
    (staging / "vectors.json").write_text(json.dumps(plan_vectors(), indent=1, sort_keys=True) + "\n")
    shutil.rmtree(cached, ignore_errors=True)
    staging.rename(cached)
for name in ("distlab.zip", "vectors.json"):
    with mkdocs_gen_files.open(f"assets/plan/{name}", "wb") as f:
        f.write((cached / name).read_bytes())
# The bundle's address carries a hash of its bytes: a browser never runs a cached bundle of an older site.
bundle = f"plan/distlab.zip?v={hashlib.sha256((cached / 'distlab.zip').read_bytes()).hexdigest()[:16]}"
with mkdocs_gen_files.open("assets/plan/form.json", "w") as f:
    f.write(json.dumps(plan_form() | {"bundle": bundle}, indent=1, sort_keys=True) + "\n")
