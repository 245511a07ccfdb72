"""flash-attention-compile: our FlashAttention Triton kernels compiled for A100, H100 and B200 on a CPU-only machine.

Every kernel of distlab/attention/triton_kernel.py (the forward; the backward's delta, dK/dV and dQ kernels) is
compiled for sm_80, sm_90 and sm_100 with every config its autotuner can choose for 16-bit inputs (the `_HALF`
lists). One case stands for the sweep: bf16, causal, head dim 128 (the largest the kernel takes, so the most
registers and shared memory), contiguous (B, H, N, d) tensors with N = 4096. fp16 shares bf16's configs and
instructions; fp32 has small tiles of its own and IEEE fp32 dots that do not use the tensor cores, so it is left out
to keep the build short. The shape enters only through Triton's specialisation (which strides are 1, which are
multiples of 16): any N that is a multiple of 16 compiles to the same code.

The kernels are compiled with the arguments our own launchers pass (`flash_forward`, `flash_backward` run with the
kernels swapped for a recorder), through the specialisation a real launch applies: distlab/attention/triton_aot.py.
Occupancy (blocks per SM) follows from the registers and shared memory the compiler reports and each GPU's per-SM
limits in gpus.toml, counted two ways (distlab/hardware/occupancy.py). One config is compiled a second time from a
hand-typed signature, which shows what the specialisation changes. Deterministic for a given triton version; the
page states the version and the date.
"""

from __future__ import annotations

import re

from distlab.core.experiments import experiment
from distlab.core.results import Result
from distlab.hardware.occupancy import blocks_per_sm, blocks_per_sm_naive, limiter, sm_limits

TARGETS = {80: "A100-SXM-80GB", 90: "H100-SXM", 100: "B200"}  # compute capability x 10 -> gpus.toml entry
MMA = {80: "mma.sync", 90: "wgmma.mma_async", 100: "tcgen05.mma"}  # each target's own tensor-core instruction
SHAPE = (1, 16, 4096, 128)  # (B, H, N, d)
NAMES = {"fwd": "_fwd_kernel", "delta": "_bwd_delta_kernel", "dkdv": "_bwd_dkdv_kernel", "dq": "_bwd_dq_kernel"}
DOTS = ("fwd", "dkdv", "dq")  # the kernels with matmuls (delta is a row sum)
COST = {"fwd": 3.0, "dkdv": 2.0, "dq": 1.0, "delta": 0.1}  # rough compile times, relative; sm_100 takes about 2x
DELTA_LAUNCH = (64, 0, 0, 0)  # flash_backward launches delta with BLOCK_M = 64 and Triton's default warps/stages


def autotune_configs() -> dict[str, list[tuple]]:
    """(BLOCK_M, BLOCK_N, warps, stages) the autotuner can choose for 16-bit inputs, per kernel."""
    from distlab.attention import triton_kernel as fa

    return {
        "fwd": list(fa._HALF["fwd"]),
        "delta": [DELTA_LAUNCH],
        "dkdv": list(fa._HALF["dkdv"]),
        "dq": list(fa._HALF["dq"]),
    }


def jobs() -> list[dict]:
    """Every kernel x config x target, then the first forward config for sm_80 from a hand-typed signature."""
    configs = autotune_configs()
    out = [
        {"kernel": k, "config": list(cfg), "cc": cc, "specialize": True, "cost": COST[k] * (2 if cc == 100 else 1)}
        for k, cfgs in configs.items()
        for cfg in cfgs
        for cc in TARGETS
    ]
    return out + [{"kernel": "fwd", "config": list(configs["fwd"][0]), "cc": 80, "specialize": False, "cost": 1.0}]


class _Recorder:
    """Stands in for a @triton.jit kernel: `rec[grid](*args, **kwargs)` records the call instead of launching."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def launch_args(kernel: str, config: tuple, shape=SHAPE):
    """(jit function, args, kwargs) our launchers pass for `kernel` at `config` (causal, bf16), on meta tensors (no
    memory; a meta tensor's address is 0, so it is aligned like a CUDA allocation)."""
    import torch

    from distlab.attention import triton_kernel as fa

    recorders = {k: _Recorder(getattr(fa, name)) for k, name in NAMES.items()}
    q, k, v, o, do = (torch.empty(shape, dtype=torch.bfloat16, device="meta") for _ in range(5))
    lse = torch.empty(shape[:3], dtype=torch.float32, device="meta")
    try:
        for key, name in NAMES.items():
            setattr(fa, name, recorders[key])
        if kernel == "fwd":
            fa.flash_forward(q, k, v, causal=True, config=tuple(config))
        else:  # delta's launch does not depend on the config
            fa.flash_backward(
                q, k, v, o, lse, do, causal=True, config=fa.DEFAULT_BWD if kernel == "delta" else tuple(config)
            )
    finally:
        for key, name in NAMES.items():
            setattr(fa, name, recorders[key].fn)
    ((args, kwargs),) = recorders[kernel].calls
    return recorders[kernel].fn, args, kwargs


def build(job: dict):
    """The triton_aot builder: the job's kernel and launch arguments (runs in a compile worker)."""
    fn, args, kwargs = launch_args(job["kernel"], tuple(job["config"]))
    return fn, args, kwargs, job["cc"], job["specialize"]


def short_ptx(line: str, keep: int = 2) -> str:
    """A PTX line with long register lists cut: `{ %r1, %r2, %r3, %r4, %r5 }` -> `{ %r1, %r2, … }`."""

    def cut(m):
        regs = [r.strip() for r in m.group(1).split(",")]
        return m.group(0) if len(regs) <= keep + 1 else "{ " + ", ".join(regs[:keep]) + ", … }"

    return re.sub(r"\{([^{}]*)\}", cut, line)


def _async(x: dict) -> int:
    return x["ptx"]["cp.async.cg"] + x["ptx"]["cp.async.ca"]


def _kib(n_bytes: int) -> str:
    return f"{n_bytes / 1024:.2f}".rstrip("0").rstrip(".") + " KiB"


def _tiles(x: dict) -> str:
    bm, bn = x["config"][:2]
    return f"{bm}" if x["kernel"] == "delta" else f"{bm}×{bn}"


@experiment(
    "flash-attention-compile",
    "our FlashAttention Triton kernels compiled for sm_80/sm_90/sm_100 without a "
    "GPU: tensor-core instructions, registers, spills, shared memory, occupancy",
    kind="computed",
    versions=("triton",),
)
def flash_attention_compile(device: str) -> Result:
    import datetime as dt
    import time

    from distlab.attention.triton_aot import ASYNC_COPIES, MMA_FAMILIES, compile_jobs

    start = time.perf_counter()
    results, versions = compile_jobs("distlab.attention.flash_attention_compile:build", jobs())
    wall = time.perf_counter() - start
    r = Result("flash-attention-compile", kind="computed")
    main = [x for x in results if x["specialize"]]
    plain = next(x for x in results if not x["specialize"])
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    r.data = {
        "versions": versions,
        "date": date,
        "results": [{k: v for k, v in x.items() if k != "ptx_lines"} for x in results],
    }
    configs = autotune_configs()
    r.add("compiles", len(main), "", "kernel x config x target compiles")
    r.add(
        "configs",
        sum(len(c) for k, c in configs.items() if k != "delta"),
        "",
        "autotune configs (forward, dK/dV, dQ) for 16-bit inputs",
    )
    r.add("wall_seconds", wall, "s", "wall time of every compile, 2 worker processes")
    r.add("cpu_seconds", sum(x["seconds"] for x in results), "s", "sum of the compile times")
    r.add("head_dim", SHAPE[3], "", "head dim compiled for")
    r.claim(
        "every kernel x config x target compiled",
        len(main),
        len(TARGETS) * sum(len(c) for c in configs.values()),
        formula=f"{len(TARGETS)} targets x (forward, delta, dK/dV, dQ configs)",
    )
    r.claim(
        "ptxas' register count equals the cubin's (cuobjdump), every kernel",
        sum(x["ptxas_registers"] != x["registers"] for x in main),
        0,
        formula="mismatches",
    )
    r.claim(
        "ptxas' stack frame equals the cubin's stack size, every kernel",
        sum(x["stack_frame"] != x["stack"] for x in main),
        0,
        formula="mismatches",
    )
    occupancy_rows, mismatches = [], 0
    for cc, chip in TARGETS.items():
        lim = sm_limits(chip)
        mma, sass = MMA[cc], MMA_FAMILIES[MMA[cc]]
        here = [x for x in main if x["cc"] == cc]
        dots = [x for x in here if x["kernel"] in DOTS]
        rows = []
        for x in here:
            occ = blocks_per_sm(lim, regs=x["registers"], warps=x["num_warps"], smem_bytes=x["shared"])
            naive = blocks_per_sm_naive(lim, regs=x["registers"], warps=x["num_warps"], smem_bytes=x["shared"])
            mismatches += occ["min"] != naive["min"]
            x["blocks"] = occ["min"]
            family = f"{mma} ×{x['ptx'][mma]} / {sass} ×{x['sass'][sass]}" if x["kernel"] in DOTS else "none"
            rows.append(
                [
                    x["kernel"],
                    _tiles(x),
                    x["num_warps"],
                    x["num_stages"],
                    family,
                    _async(x),
                    x["registers"],
                    x["stack"],
                    x["spill_stores"],
                    _kib(x["shared"]),
                    f"{occ['min']} ({limiter(occ)})",
                    f"{occ['min'] * x['num_warps'] / lim.max_warps_per_sm:.0%}",
                ]
            )
            occupancy_rows.append(occ["min"])
        r.table(
            f"sm_{cc}",
            [
                "kernel",
                "tile",
                "warps",
                "stages",
                "tensor-core instr. (PTX / SASS)",
                "cp.async",
                "registers",
                "stack B",
                "spill stores B",
                "shared mem",
                "blocks/SM (limit)",
                "occupancy",
            ],
            rows,
            caption=f"sm_{cc} ({chip}, compute capability {lim.compute_capability}): bf16, causal, d = "
            f"{SHAPE[3]}, every config the autotuner can choose; compiled with triton "
            f"{versions['triton']} on {date}, no GPU involved.",
        )
        r.claim(
            f"sm_{cc}: every matmul kernel uses {mma} and no other tensor-core instruction",
            sum(x["ptx"][mma] > 0 and sum(x["ptx"][o] for o in MMA_FAMILIES if o != mma) == 0 for x in dots),
            len(dots),
            formula="kernels",
        )
        r.claim(
            f"sm_{cc}: {sass} in the cubin's SASS equals {mma} in the PTX",
            sum(x["sass"][sass] for x in dots),
            sum(x["ptx"][mma] for x in dots),
            formula="summed over the matmul kernels",
        )
        r.claim(
            f"sm_{cc}: K/V loads are asynchronous copies (cp.async) in every matmul kernel",
            sum(_async(x) > 0 for x in dots),
            len(dots),
            formula="kernels",
        )
        r.claim(
            f"sm_{cc}: LDGSTS in the SASS equals cp.async in the PTX",
            sum(x["sass"]["LDGSTS"] for x in dots),
            sum(_async(x) for x in dots),
            formula="summed over the matmul kernels",
        )
        r.claim(
            f"sm_{cc}: largest shared-memory request fits one block's limit ({chip})",
            max(x["shared"] for x in here),
            lim.smem_per_block_optin_bytes,
            relation="<=",
            unit="B",
            formula="metadata.shared <= smem_per_block_optin",
        )
        r.claim(
            f"sm_{cc}: no config spills registers",
            sum(x["spill_stores"] + x["spill_loads"] > 0 for x in here),
            0,
            formula="kernels with spill stores or loads (ptxas)",
        )
        r.add(
            f"sm{cc}_max_registers",
            max(x["registers"] for x in dots),
            "registers",
            f"most registers per thread of a matmul kernel, sm_{cc}",
        )
        r.add(f"sm{cc}_max_shared", max(x["shared"] for x in here), "B", f"largest shared memory request, sm_{cc}")
        r.add(f"sm{cc}_smem_optin", lim.smem_per_block_optin_bytes, "B", f"{chip}: shared memory one block may use")
    r.claim(
        "blocks per SM: NVIDIA's per-sub-partition count equals the textbook bound, every kernel",
        mismatches,
        0,
        formula="mismatches",
    )
    matmul = [x for x in main if x["kernel"] in DOTS]
    r.add(
        "one_block_share",
        sum(x["blocks"] == 1 for x in matmul) / len(matmul),
        "fraction",
        "share of matmul-kernel compiles that hold one block per SM",
    )
    r.add(
        "max_occupancy",
        max(x["blocks"] * x["num_warps"] / sm_limits(TARGETS[x["cc"]]).max_warps_per_sm for x in matmul),
        "fraction",
        "highest occupancy (warps) of a matmul kernel",
    )
    r.claim("every kernel fits at least one block per SM", min(occupancy_rows), 1, relation=">=")
    first = next(x for x in main if x["kernel"] == "fwd" and x["cc"] == 80 and x["config"] == plain["config"])
    r.add("plain_cp_async", _async(plain), "", "cp.async in the forward compiled from a hand-typed signature, sm_80")
    r.add("spec_cp_async", _async(first), "", "cp.async in the same forward compiled as launched, sm_80")
    r.add("plain_shared", plain["shared"], "B", "shared memory, hand-typed signature")
    r.add("spec_shared", first["shared"], "B", "shared memory, as launched")
    r.add("plain_spill", plain["spill_stores"], "B", "spill stores, hand-typed signature")
    r.add("spec_spill", first["spill_stores"], "B", "spill stores, as launched")
    r.claim(
        "without the launch's specialisation the same forward has no cp.async",
        _async(plain),
        0,
        formula="hand-typed signature (no divisibility hints, stride 1 not constant)",
    )
    lines = [
        [f"sm_{cc}", op, f"`{short_ptx(x['ptx_lines'][op])}`"]
        for cc, op in ((80, "cp.async.cg"), (90, "wgmma.mma_async"), (100, "tcgen05.mma"))
        for x in [next(x for x in main if x["kernel"] == "fwd" and x["cc"] == cc)]
        if x["ptx_lines"][op]
    ]
    r.table(
        "ptx",
        ["target", "instruction", "first such line of the forward kernel's PTX"],
        lines,
        caption="Long register lists cut with …. In the SASS, "
        + ", ".join(f"{k} becomes {v}" for k, v in {**MMA_FAMILIES, "cp.async": "LDGSTS"}.items())
        + ".",
    )
    r.claim(
        "no TMA bulk copies (cp.async.bulk.tensor) in any kernel",
        sum(x["ptx"]["cp.async.bulk.tensor"] + x["sass"][ASYNC_COPIES["cp.async.bulk.tensor"]] for x in main),
        0,
        formula="PTX + SASS (UTMALDG) count",
    )
    r.claim("the three PTX lines were found", len(lines), 3)
    return r
