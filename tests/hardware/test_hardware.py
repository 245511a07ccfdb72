"""The hardware data against the datasheets it cites, the derived numbers against hand arithmetic, and the
matmul-dtypes error model against float64."""

import math

import pytest
import torch

from distlab.core.facts import entries, fact
from distlab.gpu.matmul_dtypes import UNIT_ROUNDOFF, _matmul_variants
from distlab.hardware.gpus import GPU, gpu, gpu_names, match_device

NUMERIC_FIELDS = (
    "hbm_gb",
    "hbm_tbps",
    "bf16_dense_tflops",
    "fp16_dense_tflops",
    "tf32_dense_tflops",
    "fp32_tflops",
    "bf16_sparse_tflops",
    "sms",
    "l2_mib",
    "smem_per_sm_kib",
)


def test_required_chips_and_chapter_one_fields():
    """Would catch a renamed entry or field that chapter 1 and the planner cite."""
    assert {"A100-SXM-80GB", "H100-SXM", "H200", "B200", "MI300X"} <= set(gpu_names())
    for chip in ("A100-SXM-80GB", "H100-SXM"):
        for field in ("hbm_gb", "hbm_tbps", "bf16_dense_tflops", "fp32_tflops"):
            assert fact(f"gpus.{chip}.{field}").value > 0
    assert fact("gpus.H100-SXM.hbm_gb").source.key == "h100-datasheet"


@pytest.mark.parametrize("chip", ["A100-SXM-80GB", "H100-SXM", "H200", "B200", "MI300X"])
def test_every_value_names_a_source_and_unit(chip):
    """Would catch a number typed without a source (fact() raises) or a source key left undefined."""
    row = entries("gpus")[chip]
    for field in NUMERIC_FIELDS:
        f = fact(f"gpus.{chip}.{field}")
        assert f.source.title and (f.source.url or f.source.detail), (chip, field)
        assert f.value > 0
    fp8 = "fp8_dense_tflops" in row
    assert fp8 == (chip != "A100-SXM-80GB")  # the A100 has no fp8 tensor cores


@pytest.mark.parametrize("chip", ["A100-SXM-80GB", "H100-SXM", "H200", "B200", "MI300X"])
def test_link_lives_once_in_interconnect(chip):
    """Would catch a link bandwidth typed into gpus.toml again (a second copy that can drift from
    interconnect.toml), or a chip naming a link that interconnect.toml does not define or cite."""
    row = entries("gpus")[chip]
    assert not {"links", "link_gbps", "link_name"} & set(row)
    name = fact(f"gpus.{chip}.link").value
    assert name in entries("interconnect")
    for field in ("name", "links", "nccl_transport"):
        f = fact(f"interconnect.{name}.{field}")
        assert f.value and f.source.title and (f.source.url or f.source.detail), (name, field)
    assert gpu(chip).link_name == fact(f"interconnect.{name}.name").value


# Published figures, typed here from the datasheets (independent of the data file): dense peaks in TFLOP/s
# (NVIDIA prints 2x with sparsity), HBM TB/s, SMs, and the one-direction link bandwidth = printed total / 2.
PUBLISHED = {
    "A100-SXM-80GB": dict(bf16=312, tf32=156, fp32=19.5, hbm_tbps=2.039, sms=108, link_one_way_gbps=300),
    "H100-SXM": dict(bf16=1979 / 2, tf32=989 / 2, fp32=67, fp8=3958 / 2, hbm_tbps=3.35, sms=132, link_one_way_gbps=450),
    "H200": dict(bf16=1979 / 2, fp8=3958 / 2, hbm_tbps=4.8, hbm_gb=141, sms=132, link_one_way_gbps=450),
    "B200": dict(bf16=4500 / 2, fp8=9000 / 2, fp32=75, hbm_tbps=7.7, link_one_way_gbps=900),
    "MI300X": dict(
        bf16=1307.4,
        fp8=2614.9,
        tf32=653.7,
        fp32=163.4,
        hbm_tbps=5.3,
        hbm_gb=192,
        sms=304,
        link_one_way_gbps=7 * 128 / 2,
    ),
}


@pytest.mark.parametrize("chip", list(PUBLISHED))
def test_values_match_the_published_figures(chip):
    """Would catch a with-sparsity figure stored as dense, a TB/s typed as GB/s, or a bidirectional link
    figure used as one-directional."""
    g, pub = gpu(chip), PUBLISHED[chip]
    for dt in ("bf16", "tf32", "fp32", "fp8"):
        if dt in pub:
            assert g.peak_flops(dt) == pytest.approx(pub[dt] * 1e12, rel=1e-3), dt
    assert g.hbm_bytes_per_s == pytest.approx(pub["hbm_tbps"] * 1e12)
    assert g.link_bytes_per_s == pytest.approx(pub["link_one_way_gbps"] * 1e9)
    if "sms" in pub:
        assert g.sms == pub["sms"]
    if "hbm_gb" in pub:
        assert g.hbm_bytes == pub["hbm_gb"] * 1e9


@pytest.mark.parametrize(("chip", "published"), [("A100-SXM-80GB", 267.9), ("H100-SXM", 792.1), ("MI300X", 781.9)])
def test_mamf_is_the_published_measurement_below_the_peak(chip, published):
    """ml-engineering's maximum-achievable-matmul table, typed here: would catch a MAMF attributed to the
    wrong chip, typed as the datasheet peak, or cited to the chip's datasheet instead of the measurement."""
    f = fact(f"gpus.{chip}.bf16_mamf_tflops")
    assert f.value == published and f.source.key == "ml-engineering-mamf" and f.unit == "TFLOP/s"
    assert 0.5 < f.value * 1e12 / gpu(chip).peak_flops("bf16") < 1


def test_sram_sizes_are_binary_units():
    """H100: 228 KiB shared memory per SM = 233,472 bytes (CUDA's deviceQuery), L2 50 MiB = 52,428,800 bytes."""
    h100 = gpu("H100-SXM")
    assert h100.smem_per_sm_bytes == 233_472
    assert h100.l2_bytes == 52_428_800
    assert h100.smem_total_bytes == 132 * 233_472


def test_ridge_is_peak_over_bandwidth():
    """Hand arithmetic: 989 TFLOP/s / 3.35 TB/s = 295.22 FLOP/B; H200 989 / 4.8 = 206.04."""
    assert gpu("H100-SXM").ridge("bf16") == pytest.approx(295.2239, rel=1e-6)
    assert gpu("H200").ridge("bf16") == pytest.approx(206.0417, rel=1e-6)
    assert gpu("A100-SXM-80GB").ridge("fp32") == pytest.approx(19.5 / 2.039, rel=1e-9)


def test_unknown_names_and_dtypes_raise_with_the_known_ones():
    with pytest.raises(
        ValueError, match="unknown GPU 'Z100'; known: A100-SXM-80GB, H100-SXM, H200, B200, GB200, MI300X"
    ):
        gpu("Z100")
    with pytest.raises(ValueError, match="no fp8"):
        gpu("A100-SXM-80GB").peak_flops("fp8")
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        gpu("H100-SXM").ridge("int4")
    assert gpu(" h100-sxm ").name == "H100-SXM"


def test_gpu_validates_its_fields():
    with pytest.raises(ValueError, match="sms must be positive"):
        GPU(
            name="x",
            title="x",
            vendor="x",
            sms=0,
            hbm_bytes=1,
            hbm_bytes_per_s=1,
            l2_bytes=1,
            smem_per_sm_bytes=1,
            link_bytes_per_s=1,
            link_name="x",
        )


@pytest.mark.parametrize(
    ("device_name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
        ("NVIDIA B200", "B200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("NVIDIA A100-SXM4-40GB", None),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("Tesla T4", None),
    ],
)
def test_match_device(device_name, expected):
    """Would catch a PCIe or 40 GB card silently given the SXM 80 GB datasheet (a wrong MFU denominator)."""
    got = match_device(device_name)
    assert (got.name if got else None) == expected


@pytest.mark.parametrize("n", [97, 300])
def test_matmul_variants_error_is_of_the_order_of_unit_roundoff(n):
    """bf16 error must lie in [u/4, u] against float64, fp32's under sqrt(n) u. Would catch the "bf16" variant
    silently computing in fp32 (error far below u/4) or fp32 running in a reduced precision."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(n, n + 3, generator=g), torch.randn(n + 3, n - 1, generator=g)
    ref = a.double() @ b.double()
    variants = _matmul_variants(a, b, gpu_paths=False)
    errors = {dt: ((fn().double() - ref).norm() / ref.norm()).item() for dt, fn in variants.items()}
    assert set(errors) == {"fp32", "bf16"}
    assert UNIT_ROUNDOFF["bf16"] / 4 <= errors["bf16"] <= UNIT_ROUNDOFF["bf16"]
    assert errors["fp32"] <= math.sqrt(n) * UNIT_ROUNDOFF["fp32"]
    assert UNIT_ROUNDOFF == {"fp32": 2**-24, "tf32": 2**-11, "bf16": 2**-8, "fp16": 2**-11, "fp8": 2**-4}


def test_gpu_specs_experiment_claims_pass():
    """The data-entry checks (sparse = 2 x dense, fp16 = bf16) hold for every chip."""
    from distlab.core import experiments

    result, _ = experiments.run("gpu-specs", "cpu", use_cache=False)
    assert not result.failed_claims
    assert result.quantities["h100_ridge_bf16"].value == pytest.approx(295.2239, rel=1e-6)
    assert result.quantities["h100_square_gemm_n_at_ridge"].value == pytest.approx(3 * 295.2239, rel=1e-6)
    assert result.quantities["wp_true_mfu"].value == pytest.approx(0.6 * 312 / 989)


def test_fp8_variant_scales_and_layout():
    """The GPU-only fp8 path (per-tensor scales to e4m3's 448, column-major second operand) runs on CPU's
    torch._scaled_mm too: its error must be of the order of e4m3's unit roundoff. Would catch a missing
    rescale (error ~1) or a transposed operand."""
    g = torch.Generator().manual_seed(2)
    a, b = 3 * torch.randn(64, 48, generator=g), torch.randn(48, 80, generator=g) / 5
    ref = a.double() @ b.double()
    variants = _matmul_variants(a, b, gpu_paths=True)
    assert set(variants) == {"fp32", "bf16", "tf32", "fp8"}
    try:
        out = variants["fp8"]()
    except (RuntimeError, NotImplementedError) as exc:  # a torch build without CPU _scaled_mm
        pytest.skip(f"torch._scaled_mm unavailable on CPU: {exc}")
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert UNIT_ROUNDOFF["fp8"] / 4 <= err <= UNIT_ROUNDOFF["fp8"]


@pytest.mark.parametrize(
    ("chip", "field", "typo", "guard"),
    [
        ("H100-SXM", "hbm_tbps", 3.53, "H100-SXM: HBM bandwidth = bus"),
        ("H100-SXM", "hbm_tbps", 3.36, "H100-SXM: HBM bandwidth = bus"),  # inside 0.5 %: half a printed unit
        ("H100-SXM", "sms", 123, "H100-SXM: FP32 lanes = SMs x lanes per SM"),
        ("A100-SXM-80GB", "sms", 54, "A100-SXM-80GB: FP32 lanes = SMs x lanes per SM"),  # 128 per SM is plausible
        ("H100-SXM", "fp32_tflops", 76, "H100-SXM: fp32 = lanes x 2"),
        ("A100-SXM-80GB", "hbm_gb", 88, "A100-SXM-80GB: HBM / stacks"),
        ("A100-SXM-80GB", "hbm_gb", 160, "A100-SXM-80GB: HBM = MLPerf"),  # 32 GB stacks exist
        ("H200", "hbm_gb", 142, "H200: HBM = MLPerf"),
        ("A100-SXM-80GB", "l2_mib", 50, "H100 L2 / A100 L2"),
        ("H200", "l2_mib", 70, "H200 L2 (device query) = the full GH100"),
        ("H200", "hbm_tbps", 4.0, "H200 / H100 HBM bandwidth"),
        ("A100-SXM-80GB", "hbm_tbps", 2.39, "A100-SXM-80GB: HBM bandwidth = bus"),
        ("A100-SXM-80GB", "tf32_dense_tflops", 157, "A100-SXM-80GB: tf32 = bf16 / 2"),
        ("H200", "smem_per_sm_kib", 256, "H200 smem per SM"),
        ("H200", "bf16_dense_tflops", 898, "H200 bf16 = H100 bf16"),
        ("B200", "fp8_dense_tflops", 4050, "B200: fp8 = 2 x bf16"),
        ("B200", "tf32_dense_tflops", 1010, "B200: tf32 = bf16 / 2"),
        ("B200", "sms", 149, "GB200 SMs = B200's"),
        ("GB200", "tf32_dense_tflops", 1260, "GB200: tf32 = rack / 72"),
        ("GB200", "hbm_gb", 187, "GB200: HBM = rack / 72"),
        ("GB200", "hbm_tbps", 9, "GB200: HBM bandwidth = rack / 72"),
        ("MI300X", "l2_mib", 23, "MI300X: L2 = XCDs x L2 per XCD"),
        ("MI300X", "sms", 340, "MI300X: CUs = XCDs"),
        ("MI300X", "fp8_dense_tflops", 2614.8, "MI300X: fp8 = CUs x 4096"),
        ("MI300X", "fp32_tflops", 163.5, "MI300X: fp32 = CUs x 256"),
        ("MI300X", "hbm_tbps", 5.4, "MI300X: HBM bandwidth = bus"),
        ("MI300X", "smem_per_sm_kib", 65, "MI300X: LDS = the ISA guide's"),
    ],
)
def test_a_typo_in_gpus_toml_breaks_a_page_claim(chip, field, typo, guard, monkeypatch):
    """hardware.gpus.data_claims, which every experiment that shows a chip's numbers runs: a mistyped datasheet
    figure must fail a relation (a second source, aggregate = per-unit x count, a printed ratio). Would catch a
    typo that moves chapter 2's ridge point or chapter 8's roofline with no claim failing (issue 16)."""
    from distlab.core.facts import dataset
    from distlab.core.results import Result
    from distlab.hardware.gpus import data_claims

    row = dataset("gpus")[chip]
    monkeypatch.setitem(row, field, typo)
    gpu.cache_clear()
    try:
        r = Result("check")
        data_claims(r, gpu_names())
        failed = [c.name for c in r.failed_claims]
    finally:
        monkeypatch.undo()
        gpu.cache_clear()
    assert any(guard in name for name in failed), failed
    clean = Result("check")
    data_claims(clean, gpu_names())
    assert not clean.failed_claims and len(clean.claims) >= 30


@pytest.mark.parametrize(
    ("printed", "half_unit"),
    [(3.35, 0.005), (2614.9, 0.05), (312, 0.5), (1100, 50), (80, 5), (2.039, 0.0005), (1.25, 0.005)],
)
def test_printed_half_unit_reads_the_last_printed_digit(printed, half_unit):
    """The tolerance of every datasheet relation: half a unit of the digit the source prints. Would catch a helper
    that counted an integer's trailing zeros as printed digits (B200's "1.1 PFLOP/s" tf32, typed 1100, would then
    fail its own relation) or that read a float's repr noise as precision."""
    from distlab.hardware.gpus import printed_half_unit

    assert printed_half_unit(printed) == pytest.approx(half_unit)
