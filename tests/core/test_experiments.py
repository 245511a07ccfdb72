"""The registry and the cache: an unchanged experiment re-runs nothing, a changed one never reuses."""

import importlib
import textwrap
import uuid

import pytest

from distlab.core import experiments
from distlab.core.results import Result


def test_discover_finds_experiments_without_importing():
    found = experiments.discover()
    assert "adamw-bytes" in found
    assert found["adamw-bytes"].module == "distlab.memory.adamw_bytes"


def test_unknown_experiment_lists_known_ones():
    with pytest.raises(experiments.UnknownExperiment, match="adamw-bytes"):
        experiments.get("no-such-experiment")


def test_a_registration_read_from_the_source_has_no_function_until_imported():
    """Would catch discover()'s registration (fn None) being called: a clear error naming the experiment and its
    module instead of "'NoneType' object is not callable"; get() gives the callable one."""
    with pytest.raises(RuntimeError, match=r"'adamw-bytes'.*distlab\.memory\.adamw_bytes is not imported"):
        callable(experiments.discover()["adamw-bytes"].function)
    assert callable(experiments.get("adamw-bytes").function)


def test_a_decorator_with_double_star_options_is_a_clear_error(tmp_path, monkeypatch):
    """Would catch `@experiment(..., **opts)` read as an option named None (its kind silently lost)."""
    from distlab.core import sources

    monkeypatch.setattr(sources, "module_name", lambda path: "distlab._tmp_mod")  # a file outside the package
    path = tmp_path / "mod.py"
    path.write_text('OPTS = {}\n\n\n@experiment("x", "y", **OPTS)\ndef x(device):\n    pass\n')
    with pytest.raises(ValueError, match=r"mod\.py:4: @experiment\(\.\.\.\) with \*\*options"):
        sources.parse(path)


@pytest.fixture
def temp_experiment(tmp_path, monkeypatch):
    """A throwaway experiment module inside the package, plus a helper module it imports."""
    monkeypatch.setenv("DISTLAB_CACHE", str(tmp_path / "cache"))
    tag = uuid.uuid4().hex[:8]
    helper = experiments.PACKAGE_DIR / f"_tmp_helper_{tag}.py"
    module = experiments.PACKAGE_DIR / f"_tmp_exp_{tag}.py"
    helper.write_text("VALUE = 1\n")
    module.write_text(
        textwrap.dedent(f"""
        from distlab import _tmp_helper_{tag} as helper
        from distlab.core.experiments import experiment
        from distlab.core.results import Result

        @experiment("tmp-{tag}", "temporary", kind="computed")
        def run(device):
            r = Result("tmp-{tag}")
            r.add("value", helper.VALUE)
            return r
    """)
    )
    yield f"tmp-{tag}", module, helper, f"distlab._tmp_helper_{tag}", f"distlab._tmp_exp_{tag}"
    module.unlink()
    helper.unlink()
    experiments._REGISTRY.pop(f"tmp-{tag}", None)


def test_cache_hits_when_unchanged_and_misses_when_a_dependency_changes(temp_experiment):
    """Would catch a cache keyed on the experiment's own file only (a changed helper must invalidate)."""
    name, module, helper, helper_mod, exp_mod = temp_experiment
    first, cached = experiments.run(name)
    assert not cached and first.quantities["value"].value == 1
    _, cached = experiments.run(name)
    assert cached
    helper.write_text("VALUE = 2\n")
    importlib.reload(importlib.import_module(helper_mod))
    importlib.reload(importlib.import_module(exp_mod))
    second, cached = experiments.run(name)
    assert not cached
    assert second.quantities["value"].value == 2


def test_stored_results_are_marked_stale_when_code_changes(temp_experiment, tmp_path, monkeypatch):
    name, module, helper, helper_mod, exp_mod = temp_experiment
    monkeypatch.setenv("DISTLAB_RESULTS", str(tmp_path / "results"))
    result, _ = experiments.run(name)
    experiments.store(result)
    [(_, stale)] = experiments.stored(name)
    assert not stale
    helper.write_text("VALUE = 3\n")
    [(_, stale)] = experiments.stored(name)
    assert stale


def test_cuda_without_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        experiments.check_device("cuda")


def _register(name: str, fn, kind: str = "measured"):
    """An experiment defined in this test file (its cache key is this file's text)."""
    experiments.experiment(name, "a test experiment", kind=kind)(fn)
    return name


def test_a_failed_result_is_never_cached(tmp_path, monkeypatch):
    """Would catch the bug where one failed build saved its failing result and every later build failed in
    a second from the cache with the same numbers."""
    monkeypatch.setenv("DISTLAB_CACHE", str(tmp_path / "cache"))
    calls = []

    def flaky(device):
        calls.append(1)
        r = Result("test-never-cache-failure")
        r.claim("two is two", 2 if len(calls) > 1 else 3, 2)
        return r

    name = _register("test-never-cache-failure", flaky)
    try:
        result, cached = experiments.run(name)
        assert result.failed_claims and not cached
        assert list((tmp_path / "cache").glob("*.json")) == []
        result, cached = experiments.run(name)
        assert not result.failed_claims and not cached and len(calls) == 2
        _, cached = experiments.run(name)
        assert cached and len(calls) == 2
    finally:
        experiments._REGISTRY.pop(name, None)


def test_timing_claims_are_measured_again_value_claims_are_not(tmp_path, monkeypatch):
    """A timing claim that fails once (noise) gets fresh runs and passes on the second; a value claim that
    fails (a wrong formula) is reported at once, without re-running."""
    monkeypatch.setenv("DISTLAB_CACHE", str(tmp_path / "cache"))
    calls = {"timing": 0, "value": 0}

    def noisy(device):
        calls["timing"] += 1
        r = Result("test-timing-retry")
        r.claim("fast enough", 2.0 if calls["timing"] == 1 else 0.5, 1.0, relation="<=", kind="timing")
        return r

    def wrong(device):
        calls["value"] += 1
        r = Result("test-value-no-retry")
        r.claim("formula", 3, 2)
        r.claim("fast enough", 2.0, 1.0, relation="<=", kind="timing")
        return r

    names = [_register("test-timing-retry", noisy), _register("test-value-no-retry", wrong)]
    try:
        result, _ = experiments.run(names[0])
        assert not result.failed_claims and calls["timing"] == 2 and result.provenance["attempts"] == 2
        result, _ = experiments.run(names[1])
        assert result.failed_claims and calls["value"] == 1
    finally:
        for n in names:
            experiments._REGISTRY.pop(n, None)


def test_a_claim_kind_must_be_known():
    with pytest.raises(ValueError, match="kind must be one of"):
        Result("x").claim("c", 1, 1, kind="noisy")


def test_a_formatting_edit_keeps_stored_results_fresh_a_formula_edit_does_not(temp_experiment, tmp_path, monkeypatch):
    """Would catch the cache key that hashed experiments.py, results.py and the formatting code into every
    result: editing how a number is printed marked every stored GPU measurement stale."""
    name, module, helper, helper_mod, exp_mod = temp_experiment
    monkeypatch.setenv("DISTLAB_RESULTS", str(tmp_path / "results"))
    result, _ = experiments.run(name)
    experiments.store(result)
    real = experiments._module_path
    edited = {}
    for machinery in ("formatting", "results", "experiments", "site"):
        machinery = f"distlab.core.{machinery}"
        copy = tmp_path / f"{machinery}.py"
        copy.write_text(real(machinery).read_text() + "\n# a presentation edit\n")
        edited[machinery] = copy
    monkeypatch.setattr(experiments, "_module_path", lambda m: edited.get(m) or real(m))
    [(_, stale)] = experiments.stored(name)
    assert not stale
    helper.write_text("VALUE = 5\n")  # the formula the experiment computes with
    [(_, stale)] = experiments.stored(name)
    assert stale


def test_cache_keys_leave_out_the_machinery_and_keep_the_formulas():
    files = {p.stem for p in experiments.code_files("distlab.sharding.zero_memory")}
    assert {"zero_memory", "zero", "model_states", "facts"} <= files
    assert not files & {"experiments", "results", "formatting", "site", "cli"}


def test_a_compilers_version_is_in_the_cache_key_of_what_it_compiled(monkeypatch):
    """flash-attention-compile reads what triton makes of our kernel: a triton upgrade must re-run it, and must
    not re-run experiments that never touch triton."""
    assert experiments.spec("flash-attention-compile").versions == ("triton",)
    before = {n: experiments._cache_key(n, "cpu") for n in ("flash-attention-compile", "adamw-bytes")}
    real = experiments.package_version
    monkeypatch.setattr(experiments, "package_version", lambda p="torch": "99.0" if p == "triton" else real(p))
    assert experiments._cache_key("flash-attention-compile", "cpu") != before["flash-attention-compile"]
    assert experiments._cache_key("adamw-bytes", "cpu") == before["adamw-bytes"]


def test_an_experiments_source_line_is_the_same_imported_or_not():
    """Would catch the source link that pointed into runtime/threads.py (a wrapped function's own code object names
    the wrapper's line) after the experiment's module was imported, and into its own module before: the page's
    link changed between a fresh and a cached build."""
    scanned = experiments.discover()
    for name in ("activation-memory", "roofline", "adamw-bytes"):
        imported = experiments.get(name)
        assert imported.source == scanned[name].source
        assert imported.source.startswith(scanned[name].module.replace(".", "/"))
