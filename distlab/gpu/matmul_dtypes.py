"""One matmul in fp32 and bf16 (on a GPU also tf32 and fp8): speed and error against float64
(experiment matmul-dtypes).
"""

from __future__ import annotations

import math

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import BYTES_PER_ELEMENT, match_device

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
        variants["fp8"] = lambda: torch._scaled_mm(a8, b8, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
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

    from distlab.runtime.threads import one_core

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

    from distlab.core.experiments import device_name
    from distlab.gpu.roofline import Kernel, gemm_flops, time_kernels

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
    chip = match_device(device_name(device)) if device == "cuda" else None
    for dt in rates:
        u = UNIT_ROUNDOFF[dt]
        peak = chip.peak_flops(dt) if chip and dt in chip.peaks else None
        over_fp32 = rates[dt] / rates["fp32"]
        err_u = errors[dt] / u
        rows.append(
            [
                dt,
                BYTES_PER_ELEMENT[dt],
                f"2^{round(math.log2(u))}",
                f"{errors[dt]:.3g}",
                f"{err_u:.2f}",
                Quantity(rates[dt], "FLOP/s"),
                f"{over_fp32:.2f}x",
                f"{100 * rates[dt] / peak:.0f} %" if peak else "—",
            ]
        )
        r.add(f"{dt}_error", errors[dt], "", f"{dt}: relative error vs float64 (Frobenius)")
        r.add(f"{dt}_flops_per_s", rates[dt], "FLOP/s", f"{dt}: achieved FLOP/s, {n}^3 matmul (median)")
        if dt != "fp32":
            r.add(f"{dt}_over_fp32", over_fp32, "", f"{dt}: speed relative to fp32")
            r.claim(  # the FLOP count cancels: a ratio of the two medians, not of the rates
                f"{dt}: speed vs fp32 = fp32's median time / {dt}'s",
                over_fp32,
                statistics.median(times["fp32"]) / statistics.median(times[dt]),
                rel_tol=1e-12,
            )
        if dt == "fp32":  # summation error grows like sqrt(k) u for random data (Higham 2002, section 3.1)
            r.claim("fp32: error / u at most sqrt(n)", err_u, n**0.5, relation="<=", formula=f"sqrt({n}), u = 2^-24")
        else:  # dominated by rounding the inputs (and a low-precision output) once: of the order of u
            r.claim(f"{dt}: error / u at most 1", err_u, 1.0, relation="<=", formula=f"u = 2^{round(math.log2(u))}")
            r.claim(f"{dt}: error / u at least 1/4 (the low precision was really used)", err_u, 0.25, relation=">=")
        if peak:
            r.claim(
                f"{chip.name} {dt}: achieved at most the dense datasheet peak",
                rates[dt],
                peak,
                relation="<=",
                rel_tol=0.02,
                unit="FLOP/s",
                kind="timing",
            )
    if chip:  # a known datacenter chip: tensor cores for bf16 and tf32
        r.claim(
            "bf16 at least 4x fp32 (tensor cores vs vector units)",
            rates["bf16"],
            4 * rates["fp32"],
            relation=">=",
            unit="FLOP/s",
            kind="timing",
        )
        r.claim("tf32 at least 2x fp32", rates["tf32"], 2 * rates["fp32"], relation=">=", unit="FLOP/s", kind="timing")
    r.add("n", n, "", "matrix size (n x n x n)")
    r.add("u_bf16", UNIT_ROUNDOFF["bf16"], "", "bf16 unit roundoff")
    r.table(
        "dtypes",
        [
            "dtype",
            "bytes/element",
            "unit roundoff u",
            "relative error",
            "error / u",
            "achieved FLOP/s",
            "vs fp32",
            "of datasheet peak",
        ],
        rows,
        caption=f"{n}x{n} @ {n}x{n} from the same standard-normal fp32 inputs; error against the float64 product "
        "of those inputs." + (" Not run: " + "; ".join(skipped) if skipped else ""),
    )
    return r
