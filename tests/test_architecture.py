"""The layering rules of ARCHITECTURE.md, read from the source (no import of the package's modules):

core -> hardware, models -> runtime -> topic folders -> planner -> calculator, practice. Nothing imports a layer above
its own; there are no import circles, function-level imports included; a formula module (one that registers no
experiment) imports neither torch nor numpy's heavy neighbours and never an experiment module; core knows no topic.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from distlab.core import sources

LAYER = {
    "core": 0,
    "hardware": 1,
    "models": 1,
    "runtime": 2,
    "memory": 3,
    "gpu": 3,
    "precision": 3,
    "data_parallel": 3,
    "sharding": 3,
    "model_parallel": 3,
    "attention": 3,
    "interconnect": 3,
    "throughput": 3,
    "scaling_laws": 3,
    "scaling_laws_checks": 3,
    "planner": 4,
    "calculator": 5,
    "practice": 5,
}
# Modules that are neither formulas nor experiments: they drive torch or a compiler by design.
TORCH_BY_DESIGN = {
    "distlab.core",  # a CUDA device's name and the provenance's torch version, imported lazily
    "distlab.runtime",
    "distlab.models.gpt",
    "distlab.models.decoder",
    "distlab.models.layers",
    "distlab.models.moe",
    "distlab.attention.triton_kernel",
    "distlab.attention.triton_aot",
    "distlab.data_parallel.ddp",
    "distlab.sharding.equivalence",
    "distlab.throughput.trace_record",  # records torch.profiler traces for `distlab trace --record-demo`
}
HEAVY = ("torch", "numpy", "triton", "matplotlib")


def _graph():
    """module -> (distlab modules it imports anywhere, heavy packages it imports anywhere)."""
    mods = {sources.module_name(p): p for p in sources.source_files()}
    imports: dict[str, set[str]] = defaultdict(set)
    heavy: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
                imports[mod] |= {t for t in targets if t in mods and t != mod}
                if node.module.split(".")[0] in HEAVY:
                    heavy[mod].add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        imports[mod].add(alias.name)
                    if alias.name.split(".")[0] in HEAVY:
                        heavy[mod].add(alias.name.split(".")[0])
    return mods, imports, heavy


def _layer(mod: str) -> int:
    return LAYER[mod.split(".")[1]]


def _experiment_modules() -> set[str]:
    return {sources.module_name(p) for p, _ in sources.registrations("experiment")}


def test_every_module_sits_in_a_known_layer():
    mods, _, _ = _graph()
    assert {m.split(".")[1] for m in mods if m.count(".") >= 1} - {"__main__"} <= set(LAYER)


def test_no_import_circles_function_level_imports_included():
    """Would catch the three circles of the flat package (activations <-> adamw_bytes, hardware <-> roofline,
    parallel_rules <-> planner), each a formula module that also held an experiment needing something higher."""
    mods, imports, _ = _graph()
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in imports[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for m in sorted(mods):
        if m not in index and m != "distlab.__main__":
            visit(m)
    assert circles == []


def test_nothing_imports_upward_and_core_knows_no_topic():
    mods, imports, _ = _graph()
    upward = [(m, t) for m in mods if m != "distlab.__main__" for t in imports[m] if _layer(t) > _layer(m)]
    assert upward == []
    core = {m: sorted(imports[m]) for m in mods if m.startswith("distlab.core.")}
    assert all(t.startswith("distlab.core.") for ts in core.values() for t in ts), core


def test_formula_modules_import_no_torch_and_no_experiment():
    """The calculators and the planner import formula modules only: a formula module that imported torch (or an
    experiment module, which may) made `distlab memory` take 3.7 s."""
    mods, imports, heavy = _graph()
    experiments = _experiment_modules()
    formulas = [m for m in mods if m not in experiments and not any(m.startswith(t) for t in TORCH_BY_DESIGN)]
    torchy = {m: sorted(heavy[m] & {"torch", "triton"}) for m in formulas if heavy[m] & {"torch", "triton"}}
    assert torchy == {}
    into_experiments = {m: sorted(imports[m] & experiments) for m in formulas if imports[m] & experiments}
    assert into_experiments == {}


def test_the_planner_and_the_calculators_load_no_torch_or_numpy_at_all():
    """The planner runs in the browser under Pyodide (no numpy) and the calculators must start in well under half
    a second: everything they import, at any depth, is pure Python (the experiment modules' lazy imports aside)."""
    mods, imports, heavy = _graph()
    experiments = _experiment_modules()
    roots = [
        "distlab.planner.search",
        "distlab.planner.plan_command",
        "distlab.planner.cost",
        "distlab.sharding.zero",
        "distlab.memory.activations",
        "distlab.gpu.flops",
        "distlab.hardware.gpus",
        "distlab.throughput.young_daly",
    ]
    seen, todo = set(), [r for r in roots if r in mods]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += [t for t in imports[m] if t not in experiments]
    loaded = {m: sorted(heavy[m]) for m in seen if heavy[m] and not m.startswith("distlab.core.")}
    assert loaded == {}


def test_every_package_folder_has_a_docstring_naming_its_chapter():
    for init in sorted(Path(sources.PACKAGE_DIR).glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init} has no docstring"
