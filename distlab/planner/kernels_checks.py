"""The kernel model (distlab.planner.kernels) worked by hand on four layers and an output head: one claim on every page
that times plans (issue 26: the guard audit found its GEMM tile, FlashAttention's backward factor, the HBM
efficiency and the sustained-rate ratios moving chapter 7's plans with no claim failing; the published runs that
judge the model are claimed on chapters 12-14 only).

Each case is written the way one would on paper. A weight GEMM is 2mnk FLOPs at the chip's matmul rate times the
training share, slowed by its last wave: its m x n output is cut into 128 x 256 tiles (mamf-finder's canonical tile),
one per SM at a time, so it keeps tiles / (waves x SMs) of the chip busy; tiles and waves below are counted by hand.
The backward of each GEMM is two of the same FLOPs: the input gradient (a tokens x k output) and the weight gradient
(a k x n output). The rates are the sources' own sentences: the H100 SXM sustains the H200's measured MSMF (the same
GH100 at the same 700 W), the A100 its burst MAMF (no sustained figure is published). FlashAttention's causal core
is 4 x s_q x s_kv x head_dim x heads / 2 FLOPs forward and 2.5 times that backward (5 matmuls against 2), at
FlashAttention-2's published figure for the key length (log-interpolated between the published lengths; on Hopper
brought from the boost clock to the power limit by MSMF / MAMF). Standard attention is two batched GEMMs per head
over every score, twice that backward, and the scores' own bytes: 4 forward (softmax in and out) plus 5 with dropout
(read, write, a 1-byte mask), 6 backward plus 5. Memory-bound kernels move the fused layer's bytes (worked by hand in
distlab.gpu.block_bytes_checks) at 80 % of the HBM datasheet bandwidth; fp8 adds a cast of every GEMM input (read
bf16, write fp8 and its transpose: 4 bytes an element); Megatron's fp32 loss moves 38 bytes a logit forward (the
cast 2 + 4, max 4, subtract 4 + 4, exp 4 + 4, sum 4, divide 4 + 4) and 14 backward (scale 4 + 4, cast back 4 + 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distlab.core.facts import entries, quoted, value
from distlab.core.results import Result, worst_relative_gap
from distlab.gpu.block_bytes import LayerSpec, layer_bytes
from distlab.hardware.gpus import gpu
from distlab.models.shapes import preset

MSMF_H200 = r"H200 bf16: GPU0 alone MSMF ([0-9.]+) TFLOPS"
MAMF_H200 = r"MAMF ([0-9.]+);"
MAMF_A100 = r"A100 SXM ([0-9.]+) of"
MAMF_H100 = r"H100 SXM ([0-9.]+) of"
HBM_SHARE = 0.8  # the planner's stated assumption for element-wise kernels (a copy reaches about 0.9)
# Megatron's fp32 loss, bytes per logit: the cast 2 + 4, max 4, subtract 4 + 4, exp 4 + 4, sum 4, divide 4 + 4 forward;
# scale 4 + 4 and the cast back 4 + 2 backward
MEGATRON_LOSS = (2 + 4 + 4 + 8 + 8 + 4 + 8, 8 + 6)


@dataclass(frozen=True)
class Case:
    """One layer on one GPU for one micro-batch: its shape as the kernel model takes it and its times by hand."""

    model: str
    chip: str
    shape: dict
    """distlab.planner.kernels.LayerShape's fields."""
    each_forward_gemm: tuple[float, ...]
    """Seconds of the QKV, projection, MLP-up and MLP-down GEMMs, each on its own (the TP overlap model hides one
    collective behind each)."""
    by_hand: tuple[float, float, float, float, float, float]
    """(GEMMs forward, GEMMs backward, attention forward, attention backward, memory forward, memory backward) s."""


def _share() -> float:
    """The training share of the benchmarks' rates (fitted once to published runs, claimed on chapter 13)."""
    return value("planner.training-share.tensor_core_share")


def sustained_flops_by_source() -> float:
    """The H100 SXM's sustained bf16 matmul rate: the H200's measured MSMF, in its source's sentence (the same GH100
    at the same 700 W)."""
    return quoted("planner.msmf-hopper.bf16_msmf_tflops", MSMF_H200) * 1e12


def a100_flops_by_source() -> float:
    """The A100's bf16 matmul rate: its burst MAMF as the source prints it (no sustained figure is published)."""
    return quoted("gpus.A100-SXM-80GB.bf16_mamf_tflops", MAMF_A100) * 1e12


def _h100_rate() -> float:
    return sustained_flops_by_source() * _share()


def _a100_rate() -> float:
    return a100_flops_by_source() * _share()


def _gemms(rate: float, sms: int, rows) -> float:
    """Seconds of the GEMMs given as (m, n, k, tiles, waves): 2mnk FLOPs at `rate` x tiles / (waves x SMs)."""
    return sum(2 * m * n * k / (rate * tiles / (waves * sms)) for m, n, k, tiles, waves in rows)


def _flash_figure(chip: str, seq_index: int) -> float:
    """FlashAttention-2's published causal forward + backward TFLOP/s at head dim 128, one of its lengths."""
    return entries("flash_attention")[f"FA2-fig-{chip}-fwdbwd-hdim128-causal"]["fa2_tflops"][seq_index]


def _msmf_over_mamf() -> float:
    """Hopper's sustained over burst matmul rate, from the same sentence: FlashAttention's figures are bursts."""
    return sustained_flops_by_source() / (quoted("planner.msmf-hopper.bf16_mamf_tflops", MAMF_H200) * 1e12)


def _memory(chip: str, spec: LayerSpec, extra: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The fused layer's bytes (and `extra` forward and backward bytes) at HBM_SHARE of the datasheet bandwidth."""
    hbm = gpu(chip).hbm_bytes_per_s * HBM_SHARE
    forward, backward = layer_bytes("fused", spec)
    return (forward + extra[0]) / hbm, (backward + extra[1]) / hbm


# Llama 2 70B on one of TP 8's ranks, 4,096 tokens: q 8,192 wide and K, V 8 x 128 each, over 8 ranks 1,280 wide;
# the projection reduces 1,024; SwiGLU's gate and up 2 x 28,672 / 8 = 7,168 wide; down reduces 3,584. 132 SMs.
LLAMA70_TP8_FORWARD = (  # (m, n, k, tiles, waves): qkv, proj, mlp_up, mlp_down
    (4096, 1280, 8192, 32 * 5, 2), (4096, 8192, 1024, 32 * 32, 8),
    (4096, 7168, 8192, 32 * 28, 7), (4096, 8192, 3584, 32 * 32, 8),
)  # fmt: skip
LLAMA70_TP8_BACKWARD = (  # input gradients (4,096 x k outputs), then weight gradients (k x n outputs)
    (4096, 8192, 1280, 32 * 32, 8), (4096, 1024, 8192, 32 * 4, 1),
    (4096, 8192, 7168, 32 * 32, 8), (4096, 3584, 8192, 32 * 14, 4),
    (8192, 1280, 4096, 64 * 5, 3), (1024, 8192, 4096, 8 * 32, 2),
    (8192, 7168, 4096, 64 * 28, 14), (3584, 8192, 4096, 28 * 32, 7),
)  # fmt: skip
LLAMA70_TP8_SPEC = LayerSpec(
    tokens=4096, seq=4096, hidden=8192, ffn=28672, heads=64, kv_heads=8, mlp="swiglu", norm="rmsnorm", rope=True,
    bias=False, tp=8, sequence_parallel=True,
)  # fmt: skip
LLAMA70_TP8 = dict(
    tokens=4096, micro_batch=1, tp=8, sequence_parallel=True, dropout=False, attention="flash", ffn=28672
)


def _case(model: str, chip: str, shape: dict, rate: float, sms: int, gemms, attention, memory) -> Case:
    """A case from its GEMMs' (forward, backward) rows, attention's and the memory-bound kernels' seconds."""
    each = tuple(_gemms(rate, sms, (row,)) for row in gemms[0])
    return Case(model, chip, shape, each, (sum(each), _gemms(rate, sms, gemms[1]), *attention, *memory))


def _flash(core_flops: float, rate: float) -> tuple[float, float]:
    """FlashAttention's forward and backward (2.5 times the forward's FLOPs) seconds at `rate`."""
    return core_flops / rate, 2.5 * core_flops / rate


def _llama70_tp8(keys: int, dtype: str) -> Case:
    """Llama 2 70B on one of TP 8's ranks (sequence parallel) on an H100: 4,096 queries attend to `keys` keys (8,192:
    CP 2; both published lengths), 8 of the 64 heads. In fp8 the GEMMs run at Hopper's fp8 MSMF and every GEMM input
    is cast (the QKV's and MLP-up's h, the projection's 8,192 / 8 and MLP-down's 28,672 / 8 per token); attention
    stays bf16."""
    fp8 = dtype == "fp8"
    rate = (value("planner.msmf-hopper.fp8_msmf_tflops") * 1e12 * _share()) if fp8 else _h100_rate()
    flash = _flash_figure("h100", {4096: 3, 8192: 4}[keys]) * 1e12 * _msmf_over_mamf() * _share()
    casts = 4 * (8192 + 1024 + 8192 + 3584) * 4096 if fp8 else 0
    shape = dict(LLAMA70_TP8, kv_tokens=keys, matmul_dtype=dtype)
    return _case(
        "70B",
        "H100-SXM",
        shape,
        rate,
        132,
        (LLAMA70_TP8_FORWARD, LLAMA70_TP8_BACKWARD),
        _flash(4 * 4096 * keys * 128 * 8 / 2, flash),
        _memory("H100-SXM", LLAMA70_TP8_SPEC, (casts, 0)),
    )


def _llama7_a100() -> Case:
    """Llama 2 7B, two sequences of 1,536 tokens on one A100 (108 SMs): 1,536 is between FlashAttention-2's
    published 1,024 and 2,048, log-interpolated; the A100's figures are its own (no power-limit correction)."""
    low, high = _flash_figure("a100", 1), _flash_figure("a100", 2)
    flash = (low + math.log2(1536 / 1024) * (high - low)) * 1e12 * _share()
    forward = (  # qkv 3 x 4,096, proj, SwiGLU 2 x 11,008 = 22,016 (86 tiles of 256), down
        (3072, 12288, 4096, 24 * 48, 11), (3072, 4096, 4096, 24 * 16, 4),
        (3072, 22016, 4096, 24 * 86, 20), (3072, 4096, 11008, 24 * 16, 4),
    )  # fmt: skip
    backward = (
        (3072, 4096, 12288, 24 * 16, 4), (3072, 4096, 4096, 24 * 16, 4),
        (3072, 4096, 22016, 24 * 16, 4), (3072, 11008, 4096, 24 * 43, 10),
        (4096, 12288, 3072, 32 * 48, 15), (4096, 4096, 3072, 32 * 16, 5),
        (4096, 22016, 3072, 32 * 86, 26), (11008, 4096, 3072, 86 * 16, 13),
    )  # fmt: skip
    spec = LayerSpec(
        tokens=3072, seq=1536, hidden=4096, ffn=11008, heads=32, kv_heads=32, mlp="swiglu", norm="rmsnorm",
        rope=True, bias=False,
    )  # fmt: skip
    shape = dict(
        tokens=3072, kv_tokens=1536, micro_batch=2, tp=1, sequence_parallel=False, dropout=False, attention="flash",
        matmul_dtype="bf16", ffn=11008,
    )  # fmt: skip
    attention = _flash(4 * 2 * 1536 * 1536 * 128 * 32 / 2, flash)
    memory = _memory("A100-SXM-80GB", spec)
    return _case("7B", "A100-SXM-80GB", shape, _a100_rate(), 108, (forward, backward), attention, memory)


def _gpt3_standard() -> Case:
    """GPT-3 175B on one of TP 8's ranks as Megatron ran it in 2021 (no sequence parallelism, dropout, attention
    without FlashAttention) on an A100, 2,048 tokens: 12 heads, each a 2,048 x 2,048 x 128 GEMM for QK^T and one
    for PV (16 x 8 tiles, 2 waves), the 12 x 2,048^2 scores through HBM."""
    forward = (  # qkv 3 x 12,288 / 8, proj reduces 1,536, GeLU's up 49,152 / 8 = 6,144, down
        (2048, 4608, 12288, 16 * 18, 3), (2048, 12288, 1536, 16 * 48, 8),
        (2048, 6144, 12288, 16 * 24, 4), (2048, 12288, 6144, 16 * 48, 8),
    )  # fmt: skip
    backward = (
        (2048, 12288, 4608, 16 * 48, 8), (2048, 1536, 12288, 16 * 6, 1),
        (2048, 12288, 6144, 16 * 48, 8), (2048, 6144, 12288, 16 * 24, 4),
        (12288, 4608, 2048, 96 * 18, 16), (1536, 12288, 2048, 12 * 48, 6),
        (12288, 6144, 2048, 96 * 24, 22), (6144, 12288, 2048, 48 * 48, 22),
    )  # fmt: skip
    rate, scores = _a100_rate(), 12 * 2048 * 2048
    attention = 2 * 12 * _gemms(rate, 108, ((2048, 2048, 128, 16 * 8, 2),))
    spec = LayerSpec(
        tokens=2048, seq=2048, hidden=12288, ffn=49152, heads=96, kv_heads=96, tp=8, dropout=True,
        attention="standard",
    )  # fmt: skip
    shape = dict(
        tokens=2048, kv_tokens=2048, micro_batch=1, tp=8, sequence_parallel=False, dropout=True,
        attention="standard", matmul_dtype="bf16", ffn=49152,
    )  # fmt: skip
    memory = _memory("A100-SXM-80GB", spec, ((4 + 5) * scores, (6 + 5) * scores))
    return _case(
        "175B",
        "A100-SXM-80GB",
        shape,
        rate,
        108,
        (forward, backward),
        (attention, 2 * attention),
        memory,
    )


def _llama70_head() -> tuple[float, float]:
    """(forward, backward) seconds of Llama 2 70B's output head on one of TP 8's ranks, 4,096 tokens on an H100: a
    4,096 x 4,000 x 8,192 GEMM (32 x 16 tiles, 4 waves), its two backward GEMMs, Megatron's fp32 loss on the
    4,096 x 4,000 logits."""
    rate, hbm = _h100_rate(), gpu("H100-SXM").hbm_bytes_per_s * HBM_SHARE
    logits = 4096 * 4000
    forward = _gemms(rate, 132, ((4096, 4000, 8192, 32 * 16, 4),)) + logits * MEGATRON_LOSS[0] / hbm
    backward = _gemms(rate, 132, ((4096, 8192, 4000, 32 * 32, 8), (8192, 4000, 4096, 64 * 16, 8)))
    return forward, backward + logits * MEGATRON_LOSS[1] / hbm


CASES = (lambda: _llama70_tp8(8192, "bf16"), lambda: _llama70_tp8(4096, "fp8"), _llama7_a100, _gpt3_standard)


def kernel_model_pairs() -> list[tuple[float, float]]:
    """(kernel model, by hand) for every term of the four layers (and each forward GEMM) and the head."""
    from distlab.planner.kernels import LayerShape, head_times, layer_times

    pairs: list[tuple[float, float]] = []
    for make in CASES:
        case = make()
        lt = layer_times(preset(case.model), gpu(case.chip), LayerShape(**case.shape, kernels="megatron"))
        model = (lt.gemm_forward, lt.gemm_backward, lt.attention_forward, lt.attention_backward, lt.memory_forward)
        pairs += zip((*model, lt.memory_backward), case.by_hand, strict=True)
        hand = case.by_hand
        pairs += [(lt.forward, hand[0] + hand[2] + hand[4]), (lt.backward, hand[1] + hand[3] + hand[5])]
        pairs += zip([t for _, t in lt.gemms], case.each_forward_gemm, strict=True)
        assert [name for name, _ in lt.gemms] == ["qkv", "proj", "mlp_up", "mlp_down"]
    pairs += zip(head_times(preset("70B"), gpu("H100-SXM"), 4096, 8, "bf16"), _llama70_head(), strict=True)
    return pairs + _borrowed_rates()


def _borrowed_rates() -> list[tuple[float, float]]:
    """A chip with no measurement of its own (a GB200) borrows the H100's: its burst MAMF share (792.1 of 989 TFLOP/s)
    of its own peak, and FlashAttention-2's H100 figure (294 TFLOP/s at 4,096, head dim 128) scaled by the two
    peaks, with no power-limit correction (the figures' chip is not the one running)."""
    from distlab.planner.kernels import flash_flops_per_s, gemm_seconds

    chip, h100 = gpu("GB200"), gpu("H100-SXM")
    scale = chip.peak_flops("bf16") / h100.peak_flops("bf16")
    mamf = quoted("gpus.H100-SXM.bf16_mamf_tflops", MAMF_H100) * 1e12 * scale
    big = (8192, 8192, 8192, 32 * 64, 14)  # 2,048 tiles on 148 SMs: 14 waves
    return [
        (flash_flops_per_s(chip, 4096, 128), _flash_figure("h100", 3) * 1e12 * scale),
        (gemm_seconds(chip, 8192, 8192, 8192), _gemms(mamf * _share(), 148, (big,))),
    ]


def kernel_model_by_hand(r: Result) -> None:
    """One claim: the kernel model's layer and head times on the cases above, and the fused layer's bytes under
    them (block_bytes_checks), the worst relative gap."""
    from distlab.gpu.block_bytes_checks import fused_layer_pairs

    r.claim(
        "kernel model, 5 cases by hand (times, fused bytes): worst gap",
        worst_relative_gap(kernel_model_pairs() + fused_layer_pairs()),
        0.0,
        abs_tol=1e-9,
    )
