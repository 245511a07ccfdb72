"""Chapter 10's launch-overhead numbers worked by hand: the sourced launch costs against the numbers in the sources'
own sentences, GPT-2 small's size against the published checkpoint, the operator count of a 12-block step counted
directly (not extrapolated from 2, 3 and 4 blocks), and the boundary T* = K c peak MFU / FLOPs per token, the single
kernels' sizes and the host-sync scenario re-derived here in float64, never through distlab.throughput.launch_bound.

Each function compares what the launch-overhead experiment put in its Result with these references, as claims.
"""

from __future__ import annotations

import re

from distlab.core.facts import source
from distlab.core.results import Result

# NVIDIA H100 datasheet, SXM column: "BF16 Tensor Core 1,979 teraFLOPS" (with sparsity; dense is half) and "GPU memory
# bandwidth 3.35 TB/s", typed here from the datasheet, not read from distlab/data/gpus.toml.
H100_BF16_DENSE = 1979e12 / 2
H100_HBM = 3.35e12
# Hugging Face's `gpt2` checkpoint (GPT-2 small, tied head): 124,439,808 parameters; its config prints n_vocab 50257,
# n_ctx 1024, n_layer 12, n_embd 768. By hand: 12 blocks x (12 h^2 + 13 h) + (50257 + 1024) x h + 2 h at h = 768.
GPT2_SMALL_PARAMS = 124_439_808


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text)]


def hta_range_s() -> tuple[float, float]:
    """HTA's 'between 5-20 microseconds', read from the source's quoted sentence (text), not its numeric fields."""
    low, high = _numbers(source("launch_overheads", "hta-launch-stats").detail.split("between", 1)[1])[:2]
    return low * 1e-6, high * 1e-6


def rk4_quote() -> tuple[float, float, float]:
    """CUDA.jl's RK4: '10 steps = 80 broadcast kernels: 260 µs to 70 µs': (kernels, eager µs, graph µs)."""
    kernels, eager_us, graph_us = _numbers(source("launch_overheads", "cuda-jl-graphs").detail.split("10 steps = ")[1])[
        :3
    ]
    return kernels, eager_us, graph_us


def _excess(triples) -> float:
    """Largest |measured − reference| − tol·|reference| over (measured, reference, tol): <= 0 if all agree."""
    return max(abs(a - b) - tol * abs(b) for a, b, tol in triples)


def sources_claim(r: Result) -> None:
    """The sourced launch costs against the numbers of the sources' own sentences: HTA's 5 and 20 µs, CUDA.jl's
    70 µs and 260 µs over 80 kernels (0.875 and 3.25 µs)."""
    q = r.quantities
    low, high = hta_range_s()
    kernels, eager_us, graph_us = rk4_quote()
    pairs = [
        (q["launch_low_s"].value, low, 1e-12),
        (q["launch_high_s"].value, high, 1e-12),
        (q["graph_kernel_s"].value, graph_us * 1e-6 / kernels, 1e-12),
        (q["eager_kernel_s"].value, eager_us * 1e-6 / kernels, 1e-12),
    ]
    r.claim("launch costs = the HTA and CUDA.jl sentences (largest excess)", _excess(pairs), 0.0, relation="<=")


def gpt2_claim(r: Result) -> None:
    r.claim(
        "GPT-2 small's parameters = Hugging Face's gpt2 (tied head)",
        r.quantities["gpt2_params"].value,
        GPT2_SMALL_PARAMS,
    )


def ops_claim(r: Result, direct: int) -> None:
    """K and fixed + 12 x per block against a 12-block step counted directly (largest gap, operators; the count is
    launch_overhead.count_twelve_blocks, a measurement, so it lives with the experiment)."""
    q = r.quantities
    gap = max(abs(q["gpt2_ops"].value - direct), abs(q["ops_fixed"].value + 12 * q["ops_per_layer"].value - direct))
    r.claim("K = a 12-block step counted directly", gap, 0)


def _tokens(kernels: float, c: float, mfu: float) -> float:
    """T* = K c peak MFU / (6 N + 12 L h s) for GPT-2 small on an H100, every factor typed here."""
    return kernels * c * H100_BF16_DENSE * mfu / (6 * GPT2_SMALL_PARAMS + 12 * 12 * 768 * 1024)


def _costs(r: Result) -> list[float]:
    """c of the table's rows: this run's dispatch + HTA's 5 or 20 µs, and CUDA.jl's 70 µs / 80 (a graphed kernel)."""
    low, high = hta_range_s()
    kernels, _, graph_us = rk4_quote()
    dispatch = r.quantities["dispatch_s"].value
    return [dispatch + low, dispatch + high, graph_us * 1e-6 / kernels]


def gpu_claim(r: Result) -> None:
    """FLOPs per token, T*, the elementwise bytes and the matmul n of the three rows by hand (the eager rows carry this
    run's measured dispatch; the CUDA-graph row is sourced numbers only: 555 x 0.875 µs x 989.5e12 x 0.4 /
    859,885,056 FLOPs = 223). T* and n to 1e-3: gpus.toml's 989 against the datasheet's 1,979 / 2."""
    q = r.quantities
    k, mfu = q["gpt2_ops"].value, q["mfu"].value
    triples = [(q["gpt2_flops_per_token"].value, 6 * GPT2_SMALL_PARAMS + 12 * 12 * 768 * 1024, 1e-12)]
    for key, c in zip(("low", "high", "graph"), _costs(r), strict=True):
        triples += [
            (q[f"tokens_{key}"].value, _tokens(k, c, mfu), 1e-3),
            (q[f"elementwise_{key}_bytes"].value, c * H100_HBM, 1e-9),
            (2 * q[f"matmul_{key}_n"].value ** 3, c * H100_BF16_DENSE, 1e-3),
        ]
    r.claim("T*, elementwise and matmul bounds by hand (largest excess)", _excess(triples), 0.0, relation="<=")


def gpu_table_claim(r: Result) -> None:
    """The GPU table read back: per row c, K c and the elementwise bytes (to 1e-9), T* and the matmul n as printed
    (half a unit and 1e-3 / 2e-4 for 989 vs 989.5); the caption's peak, HBM and MFU as printed; the header's K."""
    q = r.quantities
    k, mfu = q["gpt2_ops"].value, q["mfu"].value
    table = r.tables["gpu"]
    excess = []
    for row, c in zip(table.rows, _costs(r), strict=True):
        excess += [
            abs(a - b) - 1e-9 * b for a, b in ((row[1].value, c), (row[2].value, k * c), (row[4].value, c * H100_HBM))
        ]
        tokens, n = _tokens(k, c, mfu), (c * H100_BF16_DENSE / 2) ** (1 / 3)
        excess += [abs(float(row[3].replace(",", "")) - tokens) - 0.5 - 1e-3 * tokens]
        excess += [abs(float(row[5].replace(",", "")) - n) - 0.5 - 2e-4 * n]
    found = re.search(r"\(([\d.]+) TFLOP/s bf16 dense, HBM ([\d.]+) TB/s\) at ([\d.]+) % MFU", table.caption)
    assert found is not None, table.caption
    refs = ((H100_BF16_DENSE / 1e12, 0.5), (H100_HBM / 1e12, 0.005), (100 * mfu, 0.5))  # 989.5 prints as 989
    excess += [abs(float(a) - b) - tol for a, (b, tol) in zip(found.groups(), refs, strict=True)]
    header = re.search(r"K c for ([\d,]+) operators", table.columns[2])
    assert header is not None, table.columns[2]
    excess.append(abs(float(header.group(1).replace(",", "")) - k))
    r.claim("GPU table, caption and header by hand (largest excess)", max(excess), 0.0, relation="<=", abs_tol=1e-9)


def host_step_claim(r: Result) -> None:
    """A broken timer, not a busy machine: a small GPT's CPU step (2 blocks of width 64, batch 4 x 64 tokens) takes
    milliseconds; the fastest of 11 steps x 5 runs is under 1 s on any machine that builds this site."""
    q = r.quantities
    r.claim("fastest small-GPT step under 1 s", max(q["step_s"].value, q["step_sync_s"].value), 1.0, relation="<=")


def sync_claim(r: Result) -> None:
    """The host-sync scenario by hand: c = this run's dispatch + HTA's 5 µs, g = 2c (GPU-bound kernels), H = 2 ms.
    Without a sync the step is max(H + K c, K g) = 2 K c when K c > H; with one, H + max(K c, K g) + min(c, g) =
    H + 2 K c + c; so the sync adds (H + c) / (2 K c) (here 2 ms + c over 2 x 555 c)."""
    q = r.quantities
    k, h = q["gpt2_ops"].value, q["sync_host_s"].value  # H: an input the page states
    c = q["dispatch_s"].value + hta_range_s()[0]
    no_sync, sync = max(h + k * c, 2 * k * c), h + 2 * k * c + c
    triples = [
        (q["sync_no_s"].value, no_sync, 1e-9),
        (q["sync_yes_s"].value, sync, 1e-9),
        (q["sync_cost"].value, sync / no_sync - 1, 1e-9),
    ]
    r.claim("host-sync steps and cost by hand (largest excess)", _excess(triples), 0.0, relation="<=")
