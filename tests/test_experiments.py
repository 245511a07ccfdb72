"""The registry and the cache: an unchanged experiment re-runs nothing, a changed one never reuses."""

import importlib
import textwrap
import uuid

import pytest

from distlab import experiments


def test_discover_finds_experiments_without_importing():
    found = experiments.discover()
    assert "adamw-bytes" in found
    assert found["adamw-bytes"].module == "distlab.adamw_bytes"


def test_unknown_experiment_lists_known_ones():
    with pytest.raises(experiments.UnknownExperiment, match="adamw-bytes"):
        experiments.get("no-such-experiment")


@pytest.fixture
def temp_experiment(tmp_path, monkeypatch):
    """A throwaway experiment module inside the package, plus a helper module it imports."""
    monkeypatch.setenv("DISTLAB_CACHE", str(tmp_path / "cache"))
    tag = uuid.uuid4().hex[:8]
    helper = experiments.PACKAGE_DIR / f"_tmp_helper_{tag}.py"
    module = experiments.PACKAGE_DIR / f"_tmp_exp_{tag}.py"
    helper.write_text("VALUE = 1\n")
    module.write_text(textwrap.dedent(f"""
        from distlab import _tmp_helper_{tag} as helper
        from distlab.experiments import experiment
        from distlab.results import Result

        @experiment("tmp-{tag}", "temporary", kind="computed")
        def run(device):
            r = Result("tmp-{tag}")
            r.add("value", helper.VALUE)
            return r
    """))
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
