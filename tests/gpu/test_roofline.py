"""Roofline counting against closed forms at awkward sizes, the kernels against float64, the timing loop's
interleaving, and the experiment's code path at small sizes."""

import pytest
import torch

from distlab.gpu import roofline
from distlab.gpu.roofline import (
    Ceilings,
    Kernel,
    add_kernel,
    ceilings,
    gemm_kernel,
    matvec_kernel,
    stream_kernels,
    time_kernels,
)
from distlab.hardware.gpus import gpu_names


@pytest.mark.parametrize(("dtype", "b"), [(torch.float32, 4), (torch.bfloat16, 2)])
def test_counts_equal_hand_counts(dtype, b):
    """Would catch a byte count that forgets the output or uses the wrong element size."""
    g = gemm_kernel("g", 97, dtype, "cpu")
    assert (g.flops, g.bytes) == (2 * 97**3, 3 * 97 * 97 * b)
    assert g.intensity == pytest.approx(2 * 97 / (3 * b), rel=1e-15)
    bg = gemm_kernel("bg", 13, dtype, "cpu", batch=5)
    assert (bg.flops, bg.bytes) == (5 * 2 * 13**3, 5 * 3 * 13 * 13 * b)
    a = add_kernel("a", 1001, dtype, "cpu")
    assert (a.flops, a.bytes) == (1001, 3 * 1001 * b)
    assert a.intensity == pytest.approx(1 / (3 * b), rel=1e-15)
    mv = matvec_kernel("mv", 257, 1000, dtype, "cpu")
    assert (mv.flops, mv.bytes) == (2 * 257 * 1000, (257 * 1000 + 1000 + 257) * b)
    assert roofline.matvec_intensity(257, 1000, b) == pytest.approx(2 * 257 * 1000 / ((257 * 1000 + 1257) * b))


def test_kernels_compute_what_they_count():
    """The timed functions really are GEMM, add and matvec (float64 reference)."""
    for k, ref in [
        (gemm_kernel("g", 33, torch.float32, "cpu"), lambda a, b: a @ b),
        (gemm_kernel("bg", 7, torch.float32, "cpu", batch=3), lambda a, b: a @ b),
        (add_kernel("a", 101, torch.float32, "cpu"), lambda x, y: x + y),
        (matvec_kernel("mv", 31, 65, torch.float32, "cpu"), lambda a, x: a @ x),
    ]:
        *inputs, out = k.tensors
        k.fn()
        torch.testing.assert_close(out.double(), ref(*(t.double() for t in inputs)), rtol=1e-5, atol=1e-5)
    copy, add, triad, read, dot = stream_kernels(100, torch.float32, "cpu")
    assert copy.bytes == 2 * 100 * 4 and add.bytes == triad.bytes == 3 * 100 * 4 and read.bytes == 100 * 4
    assert dot.bytes == 2 * 100 * 4 and dot.store_bytes == read.store_bytes == 0


def test_the_memory_roof_counts_write_allocate_on_a_cpu_only():
    """STREAM copy writes n elements and reads n, but on a CPU each store first reads its line: 3n move, not
    2n (Intel's optimization manual). Would catch the roof counted from the minimum bytes, which read low enough
    that a read-only matvec ran at 100-118 % of it; and the same correction wrongly applied on a GPU."""
    copy, add, _, read, _ = stream_kernels(1000, torch.float32, "cpu")
    assert copy.traffic("cpu") == 3 * 1000 * 4 and add.traffic("cpu") == 4 * 1000 * 4
    assert read.traffic("cpu") == read.bytes
    assert copy.traffic("cuda") == copy.bytes


def test_arrays_grow_beyond_the_last_level_cache():
    """A 128 MiB STREAM array sits inside a 300 MiB L3 and measures the cache, not memory."""
    from distlab.gpu.roofline import CONFIG, last_level_cache_bytes, sizes_beyond_cache

    cfg = sizes_beyond_cache(CONFIG["cpu"], "cpu", 4)
    llc = last_level_cache_bytes("cpu")
    assert cfg["stream_n"] * 4 >= 2 * llc and cfg["mv"][0] * cfg["mv"][1] * 4 >= 2 * llc and cfg["mv"][0] % 2 == 1


def test_sysfs_cache_sizes_by_hand():
    """Would catch a unit taken as 1000 instead of 1024 or a bare byte count scaled: '1536K' is 1.5 MiB."""
    from distlab.gpu.roofline import cache_size_bytes

    assert cache_size_bytes("1536K\n") == 1_572_864 and cache_size_bytes("3M") == 3_145_728
    assert cache_size_bytes("2G") == 2_147_483_648 and cache_size_bytes("4096") == 4096


def test_datasheet_ceilings():
    """Would catch attainable() using max instead of min, or the ridge inverted."""
    c = ceilings("H100-SXM", "bf16")
    assert c.ridge == pytest.approx(989e12 / 3.35e12)
    assert c.attainable(1.0) == pytest.approx(3.35e12)
    assert c.attainable(1e4) == pytest.approx(989e12)
    assert c.bound(c.ridge / 2) == "memory-bound" and c.bound(c.ridge * 2) == "compute-bound"
    assert Ceilings("x", 10.0, 5.0).attainable(2.0) == 10.0


def test_time_kernels_interleaves_rounds():
    """Would catch timing each kernel's repeats back to back, which lets a load change hit one kernel only."""
    calls = []
    ks = [Kernel(name, (lambda name=name: calls.append(name)), 1, 1) for name in "abc"]
    times = time_kernels(ks, "cpu", rounds=3, warmup=1)
    assert calls == list("abc") + list("abc") * 3
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}


def test_experiment_code_path_at_small_sizes(monkeypatch, tmp_path):
    """The whole experiment (tables, figures, claims) on tiny sizes: the counted-intensity claims are exact
    whatever the timing; the timing claims are not asserted here (tiny arrays live in cache)."""
    small = dict(
        roofline.CONFIG["cpu"],
        ceiling_n=128,
        gemm_n=96,
        add_n=2**16 + 3,
        mv=(97, 130),
        stream_n=2**16,
        rounds=2,
        sweep=[4, 32, 256],
        sweep_bytes=2e6,
        sweep_flops=5e7,
        sweep_rounds=1,
        beyond_cache=False,
    )
    monkeypatch.setitem(roofline.CONFIG, "cpu", small)
    r = roofline.roofline("cpu")
    closed = {c.name: c for c in r.claims if "closed form" in c.name}
    assert len(closed) == 3 and all(c.passed for c in closed.values())
    assert set(r.figures) == {"roofline", "sweep"} and set(r.tables) >= {"kernels", "ceilings", "sweep"}
    assert [row[0] for row in r.tables["sweep"].rows] == [4, 32, 256]
    datasheet = [c for c in r.claims if "bf16 on the" in c.name]
    assert len(datasheet) == 3 * len(gpu_names())  # 3 kernels x every chip; a 96-wide GEMM is memory-bound on all
    assert all(c.passed for c in datasheet if "GEMM" not in c.name)
    assert not any(c.passed for c in datasheet if "GEMM" in c.name)
    assert torch.get_num_threads() >= 1  # one_core restored the thread count

    # Experiments never read stored results (the page shows them beside): a stored H200 measurement leaves the
    # CPU run's datasheet panel on the H100.
    from distlab.core import experiments

    r.provenance = {"hardware": "NVIDIA H200", "device": "cuda", "code_hash": "old", "date": "2026-01-01"}
    experiments.save(r, tmp_path / "nvidia-h200", "roofline")
    monkeypatch.setenv("DISTLAB_RESULTS", str(tmp_path))
    again = roofline.roofline("cpu")
    assert again.data["panel_gpu"] == "H100-SXM"
    assert again.quantities["panel_ridge"].value == pytest.approx(989 / 3.35)


def test_a_ridge_below_every_sweep_size_is_reported_not_crashed(monkeypatch):
    """Under load the measured ridge once fell below the smallest sweep size, and the page crashed on an empty list
    (CI, 2026-12-06). On a synthetic machine whose ridge is 0.1 FLOP/B (every GEMM compute-bound) the experiment
    still builds, and the claim that names the smallest size memory-bound is the one that fails."""
    peak, bw = 1e9, 1e10  # FLOP/s, B/s: a ridge of 0.1 FLOP/B, below any square GEMM's intensity

    def synthetic(kernels, device, rounds, warmup=1):
        return {k.name: [max(k.flops / peak, k.traffic(device) / bw)] * rounds for k in kernels}

    small = dict(
        roofline.CONFIG["cpu"],
        ceiling_n=64,
        gemm_n=64,
        add_n=2**12 + 3,
        mv=(33, 40),
        stream_n=2**12,
        rounds=2,
        sweep=[4, 32],
        sweep_bytes=1e5,
        sweep_flops=1e6,
        sweep_rounds=1,
        beyond_cache=False,
    )
    monkeypatch.setitem(roofline.CONFIG, "cpu", small)
    monkeypatch.setattr(roofline, "time_kernels", synthetic)
    r = roofline.roofline("cpu")
    assert r.quantities["ridge"].value < 0.2
    smallest = next(c for c in r.claims if c.name == "sweep: smallest GEMM is memory-bound")
    assert not smallest.passed
    assert not any("memory-bound sizes at most" in c.name for c in r.claims)
