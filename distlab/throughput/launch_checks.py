"""Chapter 10's launch-overhead numbers worked by hand: the sourced launch costs against the numbers in the sources'
own sentences, GPT-2 small's size against the published checkpoint, the operator count of a 12-block step counted
directly (not extrapolated from 2, 3 and 4 blocks), and the boundary T* = K c peak MFU / FLOPs per token, the single
kernels' sizes and the host-sync scenario re-derived here in float64, never through distlab.throughput.launch_bound.

Each function compares what the launch-overhead experiment put in its Result with these references, as claims.
"""

from __future__ import annotations

import re

import torch

from distlab.core.facts import source
from distlab.core.results import Result
from distlab.models.gpt import GPT, GPTConfig

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


def sources_claim(r: Result) -> None:
    """The sourced launch costs against the numbers of the sources' own sentences."""
    q = r.quantities
    low, high = hta_range_s()
    r.claim(
        "HTA's launch range, low end = the quoted 'between 5-20 microseconds'", q["launch_low_s"].value, low, unit="s"
    )
    r.claim("HTA's launch range, high end = the same sentence's 20", q["launch_high_s"].value, high, unit="s")
    kernels, eager_us, graph_us = rk4_quote()
    r.claim(
        "CUDA.jl RK4: a graphed kernel = the quoted 70 µs / 80 kernels",
        q["graph_kernel_s"].value,
        graph_us * 1e-6 / kernels,
        rel_tol=1e-12,
        unit="s",
        formula="70e-6 / 80 = 0.875 µs",
    )
    r.claim(
        "CUDA.jl RK4: an eager kernel = the quoted 260 µs / 80 kernels",
        q["eager_kernel_s"].value,
        eager_us * 1e-6 / kernels,
        rel_tol=1e-12,
        unit="s",
        formula="260e-6 / 80 = 3.25 µs",
    )


def gpt2_claim(r: Result) -> None:
    r.claim(
        "GPT-2 small's parameters = Hugging Face's gpt2 checkpoint (tied head)",
        r.quantities["gpt2_params"].value,
        GPT2_SMALL_PARAMS,
        formula="12·(12·768² + 13·768) + (50257 + 1024)·768 + 2·768",
    )


def count_twelve_blocks(counter_cls) -> int:
    """Kernel-launching operators of one training step of a 12-block GPT counted directly, at a tiny width (the graph
    of operators does not depend on the widths): batch 1 x 8 tokens, AdamW(foreach=True), the second step."""
    cfg = GPTConfig(vocab=32, seq=8, layers=12, hidden=16, heads=2)
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randint(0, cfg.vocab, (1, 8))
    y = torch.randint(0, cfg.vocab, (1, 8))
    model(x, y).backward()  # a first step allocates the optimizer state; count the second
    opt.step()
    opt.zero_grad(set_to_none=True)
    with counter_cls() as counter:
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return counter.kernels


def ops_claim(r: Result, counter_cls) -> None:
    q = r.quantities
    direct = count_twelve_blocks(counter_cls)
    r.claim(
        "GPT-2 small's K = a 12-block step counted directly (tiny widths)",
        q["gpt2_ops"].value,
        direct,
        formula="TorchDispatchMode over forward + backward + AdamW(foreach=True), 12 blocks, batch 1 x 8",
    )
    r.claim(
        "fixed + 12 x per block = the direct 12-block count",
        q["ops_fixed"].value + 12 * q["ops_per_layer"].value,
        direct,
    )


def _tokens(kernels: float, c: float, mfu: float) -> float:
    """T* = K c peak MFU / (6 N + 12 L h s) for GPT-2 small on an H100, every factor typed here."""
    return kernels * c * H100_BF16_DENSE * mfu / (6 * GPT2_SMALL_PARAMS + 12 * 12 * 768 * 1024)


def gpu_claim(r: Result) -> None:
    """The table's three rows by hand. The eager rows use this run's measured dispatch (they vary run to run); the
    CUDA-graph row is sourced numbers only: 555 kernels x 0.875 µs x 989.5e12 x 0.4 / 761,631,744 FLOPs = 223."""
    q = r.quantities
    k, mfu, dispatch = q["gpt2_ops"].value, q["mfu"].value, q["dispatch_s"].value
    low, high = hta_range_s()
    kernels, _, graph_us = rk4_quote()
    r.claim(
        "GPT-2 small's training FLOPs per token = 6 N + 12 L h s by hand",
        q["gpt2_flops_per_token"].value,
        6 * GPT2_SMALL_PARAMS + 12 * 12 * 768 * 1024,
        rel_tol=1e-12,
        unit="FLOP",
    )
    for key, c in (("low", dispatch + low), ("high", dispatch + high), ("graph", graph_us * 1e-6 / kernels)):
        r.claim(
            f"T* ({key}) = K c peak MFU / FLOPs per token, by hand",
            q[f"tokens_{key}"].value,
            _tokens(k, c, mfu),
            rel_tol=1e-3,  # 989 (gpus.toml) against the datasheet's 1,979 / 2
            unit="tokens",
            formula="c: dispatch + HTA's 5 or 20 µs, or CUDA.jl's 70 µs / 80",
        )
        r.claim(
            f"elementwise bound ({key}) = c x 3.35 TB/s",
            q[f"elementwise_{key}_bytes"].value,
            c * H100_HBM,
            rel_tol=1e-9,
            unit="B",
        )
        r.claim(
            f"matmul bound ({key}): 2 n³ = c x peak",
            2 * q[f"matmul_{key}_n"].value ** 3,
            c * H100_BF16_DENSE,
            rel_tol=1e-3,
            unit="FLOP",
        )


def gpu_table_claim(r: Result) -> None:
    """The GPU table's cells and caption read back: per row c, K c, T*, the elementwise bytes and the matmul n by hand
    (T* and n as printed, to the unit; the Quantities to 1e-9), and the caption's peak, bandwidth and MFU."""
    q = r.quantities
    k, mfu, dispatch = q["gpt2_ops"].value, q["mfu"].value, q["dispatch_s"].value
    low, high = hta_range_s()
    kernels, _, graph_us = rk4_quote()
    table = r.tables["gpu"]
    rel, printed = [], []
    for row, c in zip(table.rows, (dispatch + low, dispatch + high, graph_us * 1e-6 / kernels), strict=True):
        rel += [(row[1].value, c), (row[2].value, k * c), (row[4].value, c * H100_HBM)]
        printed += [
            (float(row[3].replace(",", "")), _tokens(k, c, mfu), 1e-3),  # 989 against the datasheet's 1,979 / 2
            (float(row[5].replace(",", "")), (c * H100_BF16_DENSE / 2) ** (1 / 3), 2e-4),
        ]
    r.claim(
        "GPU table: c, K c and the elementwise bytes by hand (largest relative gap)",
        max(abs(a - b) / b for a, b in rel),
        0.0,
        abs_tol=1e-9,
    )
    r.claim(
        "GPU table: T* and the matmul n as printed, by hand (largest excess over the rounding and 989 vs 989.5)",
        max(abs(a - b) - 0.5 - tol * b for a, b, tol in printed),
        0.0,
        relation="<=",
    )
    found = re.search(r"\(([\d.]+) TFLOP/s bf16 dense, HBM ([\d.]+) TB/s\) at ([\d.]+) % MFU", table.caption)
    assert found is not None, table.caption
    refs = ((H100_BF16_DENSE / 1e12, 0.5), (H100_HBM / 1e12, 0.005), (100 * mfu, 0.5))  # 989.5 prints as 989
    r.claim(
        "GPU table's caption: peak, HBM and MFU = the datasheet's and the assumed MFU, as printed (largest excess)",
        max(abs(float(a) - b) - tol for a, (b, tol) in zip(found.groups(), refs, strict=True)),
        0.0,
        relation="<=",
        abs_tol=1e-9,
    )
    r.claim(
        "GPU table's header: K = GPT-2 small's operators",
        float(re.search(r"K c for ([\d,]+) operators", table.columns[2]).group(1).replace(",", "")),
        k,
    )


def host_step_claim(r: Result) -> None:
    """A broken timer, not a busy machine: a small GPT's CPU step (2 blocks of width 64, batch 4 x 64 tokens) takes
    milliseconds; the fastest of 11 steps x 5 runs is under 1 s on any machine that builds this site."""
    for key in ("step_s", "step_sync_s"):
        r.claim(
            f"{key}: the fastest small-GPT step is under 1 s", r.quantities[key].value, 1.0, relation="<=", unit="s"
        )


def sync_claim(r: Result) -> None:
    """The host-sync scenario by hand: c = this run's dispatch + HTA's 5 µs, g = 2c (GPU-bound kernels), H = 2 ms.
    Without a sync the step is max(H + K c, K g) = 2 K c when K c > H; with one, H + max(K c, K g) + min(c, g) =
    H + 2 K c + c; so the sync adds (H + c) / (2 K c) (here 2 ms + c over 2 x 555 c)."""
    q = r.quantities
    k, h = q["gpt2_ops"].value, q["sync_host_s"].value  # H: an input the page states
    c = q["dispatch_s"].value + hta_range_s()[0]
    no_sync, sync = max(h + k * c, 2 * k * c), h + 2 * k * c + c
    r.claim("step without a sync = max(H + K c, 2 K c), by hand", q["sync_no_s"].value, no_sync, rel_tol=1e-9, unit="s")
    r.claim("step with a sync = H + 2 K c + c, by hand", q["sync_yes_s"].value, sync, rel_tol=1e-9, unit="s")
    r.claim("what the sync adds, by hand", q["sync_cost"].value, sync / no_sync - 1, rel_tol=1e-9, unit="fraction")
