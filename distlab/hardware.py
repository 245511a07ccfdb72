"""Accelerators as the rest of distlab sees them: peaks, memory, SRAM and links from distlab/data/gpus.toml.

The data file holds what datasheets print; this module derives everything else (bytes, bytes per second,
unidirectional link bandwidth, the ridge point) so no derived number is ever typed. Each chip names its
GPU-to-GPU link, whose bandwidth lives in distlab/data/interconnect.toml (read via distlab.collectives).
The planner and the calculators call `gpu(name)`; the roofline and FlashAttention chapters call
`GPU.ridge(dtype)`.

The ridge point of a chip for a dtype is peak FLOP/s divided by HBM bytes/s: a kernel that does fewer
FLOPs per byte it moves than this is memory-bound on that chip, one that does more is compute-bound
(Williams, Waterman, Patterson 2009, "Roofline: an insightful visual performance model").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from distlab.collectives import per_direction_bytes_per_s
from distlab.experiments import experiment
from distlab.facts import entries, fact
from distlab.results import Quantity, Result

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
# dtype -> the data file's field for its dense peak (fp32 is the vector units' rate, the others tensor cores)
PEAK_FIELDS = {"fp32": "fp32_tflops", "tf32": "tf32_dense_tflops", "bf16": "bf16_dense_tflops",
               "fp16": "fp16_dense_tflops", "fp8": "fp8_dense_tflops"}
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
KIB, MIB = 2**10, 2**20  # on-chip SRAM sizes are printed in binary units (a "50 MB" L2 is 50 MiB)


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One accelerator. Bytes are bytes, rates are per second, peaks are dense (no 2:4 sparsity)."""

    name: str
    """The data file's key, e.g. "H100-SXM"."""
    title: str
    """Marketing name, e.g. "NVIDIA H100 SXM5 80 GB"."""
    vendor: str
    sms: int
    """Streaming multiprocessors (NVIDIA) or compute units (AMD)."""
    hbm_bytes: float
    hbm_bytes_per_s: float
    l2_bytes: int
    smem_per_sm_bytes: int
    """Most programmer-managed SRAM one SM gives a kernel (shared memory / LDS)."""
    link_bytes_per_s: float
    """GPU-to-GPU bandwidth per GPU, one direction (printed figures add both directions)."""
    link_name: str
    peaks: dict[str, float] = field(default_factory=dict, hash=False)
    """dtype -> dense peak FLOP/s; a dtype the chip has no fast path for is absent."""
    bf16_sparse_flops: float = 0.0
    """The datasheet's with-sparsity bf16 figure (only to show what confusing it with dense does)."""

    def __post_init__(self) -> None:
        for name in ("sms", "hbm_bytes", "hbm_bytes_per_s", "l2_bytes", "smem_per_sm_bytes", "link_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"GPU {self.name}: {name} must be positive, got {getattr(self, name)}")
        unknown = set(self.peaks) - set(DTYPES)
        if unknown:
            raise ValueError(f"GPU {self.name}: unknown dtypes {sorted(unknown)}; known: {', '.join(DTYPES)}")

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for `dtype` (fp32 = vector units; tf32/bf16/fp16/fp8 = tensor cores)."""
        _check_dtype(dtype)
        if dtype not in self.peaks:
            raise ValueError(f"{self.name} has no {dtype} tensor-core path; it has {', '.join(self.peaks)}")
        return self.peaks[dtype]

    def ridge(self, dtype: str = "bf16") -> float:
        """FLOP per HBM byte at which the compute roof meets the memory roof."""
        return self.peak_flops(dtype) / self.hbm_bytes_per_s

    @property
    def smem_total_bytes(self) -> int:
        """Shared memory of the whole chip: every SM's carve-out added up."""
        return self.sms * self.smem_per_sm_bytes


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")


def gpu_names() -> list[str]:
    """Every accelerator in the data file, in file order."""
    return list(entries("gpus"))


@functools.cache
def gpu(name: str) -> GPU:
    """The accelerator called `name` (case-insensitive). Unknown names raise ValueError listing the known."""
    known = gpu_names()
    key = next((k for k in known if k.lower() == name.strip().lower()), None)
    if key is None:
        raise ValueError(f"unknown GPU {name!r}; known: {', '.join(known)}")
    row = entries("gpus")[key]

    def value(field_name: str):
        return fact(f"gpus.{key}.{field_name}").value  # fact() insists every value has a source

    peaks = {dt: value(f) * 1e12 for dt, f in PEAK_FIELDS.items() if f in row}
    link = value("link")  # the chip's GPU-to-GPU link: an entry of interconnect.toml
    return GPU(
        name=key, title=value("name"), vendor=value("vendor"), sms=value("sms"),
        hbm_bytes=value("hbm_gb") * 1e9, hbm_bytes_per_s=value("hbm_tbps") * 1e12,
        l2_bytes=round(value("l2_mib") * MIB), smem_per_sm_bytes=round(value("smem_per_sm_kib") * KIB),
        link_bytes_per_s=per_direction_bytes_per_s(link), link_name=fact(f"interconnect.{link}.name").value,
        peaks=peaks, bf16_sparse_flops=value("bf16_sparse_tflops") * 1e12,
    )


# Device names as torch reports them -> data-file entries. Variants we do not have data for (PCIe cards,
# NVL, 40 GB A100) match nothing rather than the wrong row.
_DEVICE_PATTERNS = [("H200", "H200"), ("H100", "H100-SXM"), ("A100", "A100-SXM-80GB"), ("B200", "B200"),
                    ("MI300X", "MI300X")]
_EXCLUDE = ("PCIE", "NVL", "40GB", "GH200", "GB200")


def match_device(device_name: str) -> GPU | None:
    """The data-file entry for a device name such as "NVIDIA H100 80GB HBM3", or None when we have none."""
    upper = device_name.upper()
    if any(x in upper for x in _EXCLUDE):
        return None
    for pattern, key in _DEVICE_PATTERNS:
        if pattern in upper:
            return gpu(key)
    return None


# ---------------------------------------------------------------- the chapter's hardware tables
@experiment("gpu-specs", "accelerator data with derived ridge points, SRAM/HBM and bandwidth ratios", kind="computed")
def gpu_specs(device: str) -> Result:
    r = Result("gpu-specs", kind="computed")
    chips = [gpu(n) for n in gpu_names()]
    rows = []
    for g in chips:
        rows.append([g.name, g.sms, Quantity(g.hbm_bytes, "B"), Quantity(g.hbm_bytes_per_s, "B/s"),
                     _tf(g, "bf16"), _tf(g, "fp8"), _tf(g, "tf32"), _tf(g, "fp32"),
                     f"{g.smem_per_sm_bytes // KIB} KiB", f"{g.l2_bytes / MIB:g} MiB",
                     Quantity(g.link_bytes_per_s, "B/s")])
    r.table("chips", ["chip", "SMs/CUs", "HBM", "HBM bandwidth", "bf16", "fp8", "tf32", "fp32 (vector)",
                      "smem/SM", "L2", "link, one direction"], rows,
            caption="Dense peaks (TFLOP/s, no 2:4 sparsity), memory and links per GPU, from distlab/data/gpus.toml; "
                    "'—' means the chip has no fast path for that dtype.")
    ridge_rows = []
    for g in chips:
        ridge_rows.append([g.name] + [f"{g.ridge(dt):.0f}" if dt in g.peaks else "—" for dt in ("fp32", "tf32",
                                                                                              "bf16", "fp8")])
    r.table("ridges", ["chip", "fp32", "tf32", "bf16", "fp8"], ridge_rows,
            caption="Ridge point, FLOP per HBM byte = dense peak FLOP/s / HBM bytes/s: below it a kernel is "
                    "memory-bound, above it compute-bound.")
    ratio_rows = []
    for g in chips:
        ratio_rows.append([g.name, Quantity(g.smem_total_bytes, "B"), f"{g.hbm_bytes / g.smem_total_bytes:,.0f}x",
                           f"{g.hbm_bytes / g.l2_bytes:,.0f}x", f"{g.hbm_bytes_per_s / g.link_bytes_per_s:.1f}x",
                           f"{g.peak_flops('bf16') / g.peak_flops('fp32'):.1f}x"])
    r.table("ratios", ["chip", "shared memory, all SMs", "HBM / all shared memory", "HBM / L2",
                       "HBM bandwidth / link bandwidth", "bf16 tensor / fp32 vector"], ratio_rows,
            caption="Ratios derived from the data file.")
    for g in chips:
        # Data-entry checks: the printed with-sparsity figure is twice the dense one we use, fp16 = bf16.
        r.claim(f"{g.name}: datasheet sparse bf16 = 2 x the dense peak used here", g.bf16_sparse_flops,
                2 * g.peak_flops("bf16"), rel_tol=1e-3, unit="FLOP/s", formula="2:4 sparsity doubles the rate")
        r.claim(f"{g.name}: fp16 dense peak = bf16 dense peak", g.peak_flops("fp16"), g.peak_flops("bf16"),
                unit="FLOP/s")
        slug = g.name.split("-")[0].lower()
        r.add(f"{slug}_ridge_bf16", g.ridge("bf16"), "FLOP/B", f"{g.name} bf16 ridge point")
        r.add(f"{slug}_ridge_fp32", g.ridge("fp32"), "FLOP/B", f"{g.name} fp32 (vector) ridge point")
        r.add(f"{slug}_smem_total", g.smem_total_bytes, "B", f"{g.name} shared memory, all SMs")
        r.add(f"{slug}_hbm_over_smem", g.hbm_bytes / g.smem_total_bytes, "", f"{g.name} HBM / all shared memory")
        r.add(f"{slug}_hbm_over_link", g.hbm_bytes_per_s / g.link_bytes_per_s, "",
              f"{g.name} HBM bandwidth / one-direction link bandwidth")
        r.add(f"{slug}_link", g.link_bytes_per_s, "B/s", f"{g.name} link bandwidth, one direction")
        r.add(f"{slug}_bf16_over_fp32", g.peak_flops("bf16") / g.peak_flops("fp32"), "",
              f"{g.name} bf16 tensor-core peak / fp32 vector peak")
        r.add(f"{slug}_bytes_per_flop_bf16", 1 / g.ridge("bf16"), "B/FLOP", f"{g.name} HBM bytes per bf16 FLOP")
        # a square bf16 GEMM has intensity 2n / (3 x 2 B): it reaches the ridge at n = 3 x ridge
        r.add(f"{slug}_square_gemm_n_at_ridge", 3 * g.ridge("bf16"), "", f"{g.name}: bf16 n x n GEMM at the ridge")
    h100 = gpu("H100-SXM")
    _worked_problems(r, h100)
    r.add("h100_smem_per_sm", h100.smem_per_sm_bytes, "B", "H100 shared memory per SM")
    r.add("h100_l2", h100.l2_bytes, "B", "H100 L2")
    r.add("h100_sms", h100.sms, "", "H100 SMs")
    r.add("h100_peak_bf16", h100.peak_flops("bf16"), "FLOP/s", "H100 dense bf16 peak")
    r.add("h100_hbm_bw", h100.hbm_bytes_per_s, "B/s", "H100 HBM bandwidth")
    return r


REPORTED_MFU = 0.60  # worked problem: an MFU a team reports with a peak hard-coded for the A100


def _worked_problems(r: Result, h100: GPU) -> None:
    from distlab.model_shapes import preset

    n = preset("7B").params()
    weights = 2 * n  # bf16
    r.add("wp_7b_weights", weights, "B", "Llama 2 7B bf16 weights")
    r.add("wp_7b_decode_s", weights / h100.hbm_bytes_per_s, "s", "batch-1 decode step: weights / HBM bandwidth")
    r.add("wp_7b_decode_tokens_per_s", h100.hbm_bytes_per_s / weights, "tokens/s", "batch-1 decode ceiling")
    r.add("wp_7b_decode_mfu", 2 * n * h100.hbm_bytes_per_s / weights / h100.peak_flops("bf16"), "fraction",
          "batch-1 decode at the memory roof: share of the bf16 peak")
    r.add("wp_reported_mfu", REPORTED_MFU, "fraction", "reported MFU with the A100 peak")
    r.add("wp_true_mfu", REPORTED_MFU * gpu("A100-SXM-80GB").peak_flops("bf16") / h100.peak_flops("bf16"),
          "fraction", "the same run against the H100 peak")


def _tf(g: GPU, dtype: str) -> str:
    return f"{g.peak_flops(dtype) / 1e12:g}" if dtype in g.peaks else "—"


# ---------------------------------------------------------------- tensor cores: the same matmul in each dtype
# Unit roundoff u = 2^-p for p significand bits (implicit bit included): round-to-nearest is off by at
# most u relative. fp8 is e4m3 (3 stored mantissa bits).
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11, "bf16": 2.0**-8, "fp16": 2.0**-11, "fp8": 2.0**-4}
MATMUL_N = {"cpu": 1000, "cuda": 8192}


def _matmul_variants(a, b, gpu_paths: bool) -> dict:
    """dtype -> a zero-argument function computing a @ b in that dtype (inputs cast once, outside timing).
    gpu_paths adds tf32 (a CUDA flag; elsewhere it is plain fp32) and fp8 (torch._scaled_mm, per-tensor scales)."""
    import torch

    a16, b16 = a.bfloat16(), b.bfloat16()
    variants = {"fp32": lambda: _with_tf32(False, lambda: a @ b), "bf16": lambda: a16 @ b16}
    if gpu_paths:
        variants["tf32"] = lambda: _with_tf32(True, lambda: a @ b)
        e4m3 = torch.float8_e4m3fn
        scale_a = (a.abs().max() / torch.finfo(e4m3).max).float()  # per-tensor scales: largest |x| -> 448
        scale_b = (b.abs().max() / torch.finfo(e4m3).max).float()
        a8 = (a / scale_a).to(e4m3)
        b8 = (b / scale_b).to(e4m3).t().contiguous().t()  # _scaled_mm wants the second operand column-major
        variants["fp8"] = lambda: torch._scaled_mm(a8, b8, scale_a=scale_a, scale_b=scale_b,
                                                   out_dtype=torch.bfloat16)
    return variants


def _with_tf32(allow: bool, fn):
    import torch

    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow
    try:
        return fn()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


@experiment("matmul-dtypes", "one matmul in fp32 and bf16 (GPU: also tf32, fp8): speed and error vs float64")
def matmul_dtypes(device: str) -> Result:
    """CPU: one core, as the roofline. CUDA: bf16 products accumulate in fp32 throughout (reduced-precision
    split-K reductions off), so the error is the inputs' and the output's rounding, as the bounds assume."""
    import torch

    from distlab.threads import one_core

    old_reduction = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    try:
        with one_core(device):
            return _matmul_dtypes(device)
    finally:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = old_reduction


def _matmul_dtypes(device: str) -> Result:
    import statistics

    import torch

    from distlab.experiments import hardware
    from distlab.roofline import Kernel, gemm_flops, time_kernels

    r = Result("matmul-dtypes")
    n = MATMUL_N[device]
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g)
    b = torch.randn(n, n, device=device, generator=g)
    ref = a.double() @ b.double()
    flops = gemm_flops(n, n, n)
    variants, rows, errors, rates, skipped = _matmul_variants(a, b, device == "cuda"), [], {}, {}, []
    kernels = []
    for dt, fn in variants.items():
        try:
            out = fn()
        except (RuntimeError, TypeError, AttributeError) as exc:  # e.g. fp8 on a GPU without fp8 tensor cores
            skipped.append(f"{dt}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        errors[dt] = ((out.double() - ref).norm() / ref.norm()).item()
        kernels.append(Kernel(dt, fn, flops, 0))
    times = time_kernels(kernels, device, rounds=5 if device == "cpu" else 10)
    rates = {k.name: flops / statistics.median(times[k.name]) for k in kernels}
    chip = match_device(hardware(device)) if device == "cuda" else None
    for dt in rates:
        u = UNIT_ROUNDOFF[dt]
        peak = chip.peak_flops(dt) if chip and dt in chip.peaks else None
        rows.append([dt, BYTES_PER_ELEMENT[dt], f"2^{round(math.log2(u))}", f"{errors[dt]:.3g}",
                     f"{errors[dt] / u:.2f}", Quantity(rates[dt], "FLOP/s"), f"{rates[dt] / rates['fp32']:.2f}x",
                     f"{100 * rates[dt] / peak:.0f} %" if peak else "—"])
        r.add(f"{dt}_error", errors[dt], "", f"{dt}: relative error vs float64 (Frobenius)")
        r.add(f"{dt}_flops_per_s", rates[dt], "FLOP/s", f"{dt}: achieved FLOP/s, {n}^3 matmul (median)")
        if dt != "fp32":
            r.add(f"{dt}_over_fp32", rates[dt] / rates["fp32"], "", f"{dt}: speed relative to fp32")
        if dt == "fp32":  # summation error grows like sqrt(k) u for random data (Higham 2002, section 3.1)
            r.claim("fp32: error at most sqrt(n) x u", errors[dt], n**0.5 * u, relation="<=",
                    formula=f"sqrt({n}) x 2^-24")
        else:  # dominated by rounding the inputs (and a low-precision output) once: of the order of u
            r.claim(f"{dt}: error at most its unit roundoff u", errors[dt], u, relation="<=", formula="u")
            r.claim(f"{dt}: error at least u/4 (the low precision was really used)", errors[dt], u / 4,
                    relation=">=", formula="u/4")
        if peak:
            r.claim(f"{chip.name} {dt}: achieved at most the dense datasheet peak", rates[dt], peak, relation="<=",
                    rel_tol=0.02, unit="FLOP/s")
    if chip:  # a known datacenter chip: tensor cores for bf16 and tf32
        r.claim("bf16 at least 4x fp32 (tensor cores vs vector units)", rates["bf16"], 4 * rates["fp32"],
                relation=">=", unit="FLOP/s")
        r.claim("tf32 at least 2x fp32", rates["tf32"], 2 * rates["fp32"], relation=">=", unit="FLOP/s")
    r.add("n", n, "", "matrix size (n x n x n)")
    r.add("u_bf16", UNIT_ROUNDOFF["bf16"], "", "bf16 unit roundoff")
    r.table("dtypes", ["dtype", "bytes/element", "unit roundoff u", "relative error", "error / u",
                       "achieved FLOP/s", "vs fp32", "of datasheet peak"], rows,
            caption=f"{n}x{n} @ {n}x{n} from the same standard-normal fp32 inputs; error against the float64 product "
                    "of those inputs." + (" Not run: " + "; ".join(skipped) if skipped else ""))
    return r
