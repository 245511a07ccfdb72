"""FLOPs per token and MFU, as formulas: 6N for the matmuls, 12Lhs for attention, over the GPUs' dense peak.
Pure Python, so `distlab mfu` and the planner start without torch; distlab.gpu.flop_count checks them on a real model.
"""

from __future__ import annotations

from distlab.core.cli import MAX_GPUS, MAX_PARAMS, MAX_TOKENS, MAX_WIDTH, UsageError, command, emit, parser, positive
from distlab.hardware.gpus import DTYPES, gpu, gpu_names


def attention_flops_per_token(layers: int, hidden: int, seq: int) -> float:
    """12 L h s: QK^T and (softmax) V over the full s x s scores, forward + backward (PaLM Appendix B)."""
    for name, v in (("layers", layers), ("hidden", hidden), ("seq", seq)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return 12 * layers * hidden * seq


def flops_per_token(
    params: float, layers: int | None = None, hidden: int | None = None, seq: int | None = None
) -> float:
    """Training FLOPs per token: 6N, plus the attention term 12 L h s when layers, hidden and seq are given."""
    if not params > 0:
        raise ValueError(f"params must be positive, got {params}")
    given = [v is not None for v in (layers, hidden, seq)]
    if any(given) and not all(given):
        raise ValueError("the attention term needs all of layers, hidden and seq (or none of them)")
    return 6 * params + (attention_flops_per_token(layers, hidden, seq) if all(given) else 0)


def hardware_flops_per_token(params: float, layers: int, hidden: int, seq: int, recompute: str = "none") -> float:
    """What the GPUs execute: with full activation recompute every forward runs twice, 8N + 16 L h s
    (PyTorch's checkpoint stops a recompute early and skips each block's last matmul; flop-count measures it)."""
    if recompute not in ("none", "full"):
        raise ValueError(f"recompute must be none or full, not {recompute!r}")
    base = flops_per_token(params, layers, hidden, seq)
    return base * (4 / 3 if recompute == "full" else 1)


def mfu(tokens_per_second: float, flops_per_token: float, gpus: int, peak_flops_per_gpu: float) -> float:
    """Model FLOPs utilisation as a fraction: achieved model FLOP/s over the GPUs' dense peak."""
    for name, v in (
        ("tokens_per_second", tokens_per_second),
        ("flops_per_token", flops_per_token),
        ("gpus", gpus),
        ("peak_flops_per_gpu", peak_flops_per_gpu),
    ):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return tokens_per_second * flops_per_token / (gpus * peak_flops_per_gpu)


def mfu_report(
    *,
    params: float,
    tokens_per_second: float,
    gpus: int,
    gpu_name: str,
    dtype: str = "bf16",
    layers: int | None = None,
    hidden: int | None = None,
    seq: int | None = None,
) -> dict:
    """Everything the `distlab mfu` command prints, as a dict (its --json output)."""
    chip = gpu(gpu_name)
    peak = chip.peak_flops(dtype)
    per_token = flops_per_token(params, layers, hidden, seq)
    value = mfu(tokens_per_second, per_token, gpus, peak)
    warnings = []
    if value > 1:
        warnings.append(
            "MFU above 100 % is impossible: is --tokens-per-second the total over all GPUs, and is --params right?"
        )
    return {
        "mfu": value,
        "flops_per_token": per_token,
        "attention_flops_per_token": per_token - 6 * params,
        "params": params,
        "tokens_per_second": tokens_per_second,
        "tokens_per_second_per_gpu": tokens_per_second / gpus,
        "gpus": gpus,
        "gpu": chip.name,
        "dtype": dtype,
        "peak_flops_per_gpu": peak,
        "achieved_flops_per_gpu": tokens_per_second * per_token / gpus,
        "warnings": warnings,
    }


# ---------------------------------------------------------------- the CLI
@command("mfu", "MFU of a training run from its throughput: FLOPs per token 6N (+ 12Lhs) over the GPUs' dense peak")
def mfu_command(argv: list[str]) -> int:
    p = parser(
        "mfu",
        "Model FLOPs utilisation = tokens/s x FLOPs per token / (GPUs x dense peak).\n"
        "FLOPs per token = 6 x params, plus 12 x layers x hidden x seq when all three are given\n"
        "(PaLM, Chowdhery et al. 2022, Appendix B).",
    )
    p.add_argument("--params", type=positive(float, MAX_PARAMS), required=True, help="model parameters N (7e9 is fine)")
    p.add_argument(
        "--tokens-per-second",
        type=positive(float, 1e15),
        required=True,
        help="training throughput, total over all GPUs (real tokens, not padding)",
    )
    p.add_argument("--gpus", type=positive(int, MAX_GPUS), required=True, help="number of GPUs")
    p.add_argument("--gpu", required=True, help=f"accelerator: one of {', '.join(gpu_names())}")
    p.add_argument("--dtype", default="bf16", choices=DTYPES, help="the dtype of the matmuls (default bf16)")
    p.add_argument("--layers", type=positive(int, MAX_WIDTH), help="layers L (for the attention term)")
    p.add_argument("--hidden", type=positive(int, MAX_WIDTH), help="model width h (for the attention term)")
    p.add_argument("--seq", type=positive(int, MAX_TOKENS), help="sequence length s (for the attention term)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    a = p.parse_args(argv)
    given = [v is not None for v in (a.layers, a.hidden, a.seq)]
    if any(given) and not all(given):
        raise UsageError("distlab mfu: give all of --layers, --hidden and --seq (for the attention term), or none")
    out = mfu_report(
        params=a.params,
        tokens_per_second=a.tokens_per_second,
        gpus=a.gpus,
        gpu_name=a.gpu,
        dtype=a.dtype,
        layers=a.layers,
        hidden=a.hidden,
        seq=a.seq,
    )
    attention = (
        f" + attention 12Lhs {out['attention_flops_per_token']:.4g}"
        if all(given)
        else " (no attention term: give --layers, --hidden and --seq)"
    )
    text = "\n".join(
        [
            f"MFU: {100 * out['mfu']:.1f} %  ({out['gpus']} x {out['gpu']}, dense {out['dtype']} peak "
            f"{out['peak_flops_per_gpu'] / 1e12:g} TFLOP/s per GPU)",
            f"FLOPs per token: {out['flops_per_token']:.4g} = 6N {6 * out['params']:.4g}{attention}",
            f"achieved: {out['achieved_flops_per_gpu'] / 1e12:.4g} TFLOP/s per GPU "
            f"({out['tokens_per_second_per_gpu']:,.0f} tokens/s per GPU)",
            *[f"warning: {w}" for w in out["warnings"]],
        ]
    )
    emit(out, a.json, text)
    return 0


def preset_matmul_params(m) -> int:
    """distlab.models.shapes.ModelShape: weights that multiply (attention, MLP, the output head)."""
    h, kvw = m.hidden, m.kv * m.head_dim
    mlp = (3 if m.mlp == "swiglu" else 2) * h * m.ffn
    return m.layers * (2 * h * h + 2 * h * kvw + mlp) + m.vocab * h
