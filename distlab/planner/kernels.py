"""How long one transformer layer's kernels take on one GPU, for one micro-batch: the planner's compute model.

Three kinds of kernel, each timed from a measurement of its own kind, none fitted to a training run:

- **Matmuls** (the weight GEMMs of attention, the MLP and the output head): FLOPs at the chip's measured
  sustained matmul rate (MSMF on Hopper, distlab/data/planner.toml; elsewhere the best shape's MAMF,
  distlab/data/gpus.toml), times the *wave efficiency* of the GEMM's own shape. A GEMM splits its M x N output
  into tiles, one per SM at a time; the last
  wave of tiles leaves SMs idle. At high TP the matrices shrink (N or K by t), fewer tiles fill fewer waves,
  and more of the chip idles: the small-GEMM loss. A GEMM that moves more bytes than the chip can feed at that
  rate runs at the memory roof instead (the roofline, chapter 2).
- **Attention** (the FlashAttention core, QK^T and PV): FLOPs at FlashAttention-2's published forward +
  backward throughput on that chip, at that sequence length and head dimension (Dao 2023, the figures'
  TFLOP/s, distlab/data/flash_attention.toml). Without FlashAttention the two products are batched GEMMs and
  the s x s scores go through HBM (softmax, mask, dropout).
- **Memory-bound kernels** (norms, residual adds, the MLP's activation, rotary embeddings, dropout, fp8 casts,
  the loss): bytes read and written, at MEMORY_EFFICIENCY of the HBM bandwidth.

Backward is two matmuls per forward one (input and weight gradients), FlashAttention's own backward, and
twice the memory-bound bytes. Pure Python: the planner runs without numpy.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from distlab.core.facts import entries, value
from distlab.gpu.block_bytes import FRAMEWORKS, LayerSpec, layer_bytes, loss_bytes_per_logit
from distlab.hardware.gpus import GPU
from distlab.models.shapes import ModelShape

MEMORY_EFFICIENCY = 0.8
"""An assumption: element-wise and reduction kernels reach 80 % of the HBM datasheet bandwidth (a copy kernel
reaches about 90 %; the planner's kernels also read what they do not write)."""
TILE_M, TILE_N = 128, 256
"""The output tile of one thread block of a large GEMM: 'canonical efficient tile is 128x256' (ml-engineering's
mamf-finder notes, after arXiv 2401.14489), which sets the wave quantisation."""
FLASH_BACKWARD = 2.5  # FlashAttention's backward FLOPs per forward FLOP (5 matmuls against 2: it recomputes S)
FP8_CAST_BYTES = 4  # an fp8 GEMM input: read bf16 (2), write fp8 (1) and its transpose for the backward (1)

# The measured best matmul (MAMF) of each chip family; chips without one borrow the H100's share of the peak.
MAMF_ENTRY = {"A100": "A100-SXM-80GB", "H100": "H100-SXM", "H200": "H100-SXM", "MI300X": "MI300X"}
# FlashAttention-2's published forward + backward figures: the chip they were measured on
FLASH_FIGURES = {"A100": "A100-SXM-80GB", "H100": "H100-SXM", "H200": "H100-SXM"}


def _family(chip: GPU, table: dict[str, str]) -> str | None:
    return next((v for k, v in table.items() if chip.name.startswith(k)), None)


@functools.cache
def mamf_fraction(chip: GPU) -> float:
    """The measured best bf16 matmul over the dense bf16 peak: 0.86 on an A100, 0.80 on an H100 (an H200 has the
    H100's compute); chips without a measurement take the H100's share. A short burst at the boost clock."""
    from distlab.hardware.gpus import gpu

    entry = _family(chip, MAMF_ENTRY) or "H100-SXM"
    return value(f"gpus.{entry}.bf16_mamf_tflops") * 1e12 / gpu(entry).peak_flops("bf16")


SUSTAINED = ("H100", "H200")  # chips whose sustained (power-limited) matmul rate is measured: GH100 at 700 W


@functools.cache
def matmul_fraction(chip: GPU, dtype: str = "bf16") -> float:
    """The share of the dense peak a large matmul *sustains* once the clock has settled at the power limit (MSMF,
    distlab/data/planner.toml: H200 0.75 in bf16, 0.67 in fp8; the H100 SXM is the same chip at the same 700 W).
    Elsewhere no sustained figure is published and the burst MAMF stands in (an A100's 400 W rarely caps it)."""
    from distlab.hardware.gpus import gpu

    if chip.name.startswith(SUSTAINED):
        field = "fp8_msmf_tflops" if dtype == "fp8" else "bf16_msmf_tflops"
        return (
            value(f"planner.msmf-hopper.{field}") * 1e12 / gpu("H200").peak_flops("fp8" if dtype == "fp8" else "bf16")
        )
    return mamf_fraction(chip)


def wave_efficiency(m: int, n: int, sms: int) -> float:
    """Share of SM time a GEMM with an m x n output keeps busy: tiles / (waves x SMs)."""
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    return tiles / (math.ceil(tiles / sms) * sms)


@functools.cache
def training_share() -> float:
    """The share of their benchmarks' rates (the sustained matmul, FlashAttention's published figures) that a
    training step's tensor-core kernels reach: the cost model's one constant fitted to published runs (chapter 13,
    distlab.planner.calibration; stored in distlab/data/planner.toml, entry training-share)."""
    return value("planner.training-share.tensor_core_share")


def gemm_seconds(
    chip: GPU,
    m: int,
    n: int,
    k: int,
    dtype: str = "bf16",
    hbm_efficiency: float | None = None,
    share: float | None = None,
) -> float:
    """One (m x k) @ (k x n) GEMM: 2mnk FLOPs at the sustained rate x wave efficiency x the training share, or its
    bytes at the memory roof if slower."""
    if min(m, n, k) <= 0:
        return 0.0
    share = training_share() if share is None else share
    rate = chip.peak_flops(dtype) * matmul_fraction(chip, dtype) * wave_efficiency(m, n, chip.sms) * share
    element = 1 if dtype == "fp8" else (4 if dtype == "tf32" else 2)
    moved = element * (m * k + k * n) + 2 * m * n  # inputs in the GEMM's dtype, output in bf16
    eff = MEMORY_EFFICIENCY if hbm_efficiency is None else hbm_efficiency
    return max(2 * m * n * k / rate, moved / (chip.hbm_bytes_per_s * eff))


# ---------------------------------------------------------------- FlashAttention's measured throughput
@functools.cache
def _flash_curve(figure_gpu: str, head_dim: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    rows = [
        r
        for r in entries("flash_attention").values()
        if r.get("gpu") == figure_gpu and r.get("pass") == "forward + backward" and r.get("causal") is True
    ]
    if not rows:
        raise ValueError(f"no FlashAttention-2 forward + backward figure for {figure_gpu}")
    best = min(rows, key=lambda r: abs(math.log2(r["head_dim"] / head_dim)))
    return tuple(best["seq"]), tuple(best["fa2_tflops"])


@functools.cache
def _sustained_over_burst() -> float:
    return value("planner.msmf-hopper.bf16_msmf_tflops") / value("planner.msmf-hopper.bf16_mamf_tflops")


@functools.lru_cache(maxsize=4096)
def flash_flops_per_s(chip: GPU, seq: int, head_dim: int) -> float:
    """FlashAttention-2's measured causal forward + backward TFLOP/s at this sequence length (log-interpolated
    between the published lengths, the end values beyond them) and the nearest published head dimension.
    Chips without a figure scale the H100's by their bf16 peak. On Hopper the benchmark's burst rate is brought
    down to the power-limited clock by the matmuls' sustained-over-burst ratio (MSMF / MAMF, 0.88)."""
    from distlab.hardware.gpus import gpu

    figure = _family(chip, FLASH_FIGURES)
    scale = 1.0
    if figure is None:
        figure, scale = "H100-SXM", chip.peak_flops("bf16") / gpu("H100-SXM").peak_flops("bf16")
    if chip.name.startswith(SUSTAINED):  # the figures are short benchmarks at the boost clock: at the power limit
        scale *= _sustained_over_burst()
    seqs, tflops = _flash_curve(figure, head_dim)
    if seq <= seqs[0]:
        rate = tflops[0]
    elif seq >= seqs[-1]:
        rate = tflops[-1]
    else:
        i = next(i for i in range(1, len(seqs)) if seqs[i] >= seq)
        f = math.log(seq / seqs[i - 1]) / math.log(seqs[i] / seqs[i - 1])
        rate = tflops[i - 1] + f * (tflops[i] - tflops[i - 1])
    return rate * 1e12 * scale


# ---------------------------------------------------------------- one layer
@dataclass(frozen=True, kw_only=True)
class LayerShape:
    """What one GPU computes of one layer for one micro-batch."""

    tokens: int
    """Query tokens on this GPU: micro-batch x sequence / cp."""
    kv_tokens: int
    """Key tokens each query attends to (the whole sequence: a context-parallel rank sees every key)."""
    micro_batch: int
    tp: int
    sequence_parallel: bool
    dropout: bool
    attention: str
    matmul_dtype: str
    ffn: int
    """MLP width one token passes through (an MoE layer: top-k experts' widths together)."""
    kernels: str = "megatron"
    """The training code's kernels (distlab.gpu.block_bytes.FRAMEWORKS)."""


_layer_bytes = functools.lru_cache(maxsize=65536)(layer_bytes)


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of one layer on one GPU for one micro-batch, by kind of kernel, forward and backward."""

    gemm_forward: float
    gemm_backward: float
    attention_forward: float
    attention_backward: float
    memory_forward: float
    memory_backward: float
    gemms: tuple[tuple[str, float], ...]
    """(name, forward seconds) of each weight GEMM: the TP overlap model pairs each collective with one."""

    @property
    def forward(self) -> float:
        return self.gemm_forward + self.attention_forward + self.memory_forward

    @property
    def backward(self) -> float:
        return self.gemm_backward + self.attention_backward + self.memory_backward


def layer_shape(m: ModelShape, *, tokens: int, kv_tokens: int, micro_batch: int, tp: int, sp: bool, t) -> LayerShape:
    return LayerShape(
        tokens=tokens,
        kv_tokens=kv_tokens,
        micro_batch=micro_batch,
        tp=tp,
        sequence_parallel=sp and tp > 1,
        dropout=t.dropout,
        attention=t.attention,
        matmul_dtype=t.compute_dtype,
        ffn=m.ffn,
        kernels=t.kernels,
    )


def layer_times(
    m: ModelShape, chip: GPU, ls: LayerShape, hbm_efficiency: float | None = None, share: float | None = None
) -> LayerTimes:
    """Forward and backward seconds of one layer of `m` on one GPU for one micro-batch of shape `ls` (share: the
    tensor-core kernels' training share, default the fitted one)."""
    share = training_share() if share is None else share
    h, f, t, T = m.hidden, ls.ffn, ls.tp, ls.tokens
    q, kvw = m.q_width, m.kv * m.head_dim
    dt = ls.matmul_dtype
    eff = MEMORY_EFFICIENCY if hbm_efficiency is None else hbm_efficiency
    swiglu = m.mlp == "swiglu"
    gemm = lambda n, k: gemm_seconds(chip, T, n, k, dt, eff, share)
    shapes = (  # (name, output width n, reduced width k) of each forward GEMM, per GPU
        ("qkv", (q + 2 * kvw) // t, h),
        ("proj", h, q // t),
        ("mlp_up", (2 if swiglu else 1) * f // t, h),
        ("mlp_down", h, f // t),
    )
    forward = tuple((name, gemm(n, k)) for name, n, k in shapes)
    # backward: input gradient (tokens x n) @ (n x k) and weight gradient (k x tokens) @ (tokens x n)
    backward = sum(gemm(k, n) + gemm_seconds(chip, k, n, T, dt, eff, share) for _, n, k in shapes)
    # the attention core
    heads = m.heads // t
    causal_fwd = 4 * ls.micro_batch * (T // ls.micro_batch) * ls.kv_tokens * m.head_dim * heads * 0.5
    if ls.attention == "flash":
        rate = flash_flops_per_s(chip, ls.kv_tokens, m.head_dim) * share
        att_f, att_b = causal_fwd / rate, FLASH_BACKWARD * causal_fwd / rate
        scores_f = scores_b = 0.0
    else:  # Megatron 2021: QK^T and PV as batched GEMMs over every score (no causal skipping), scores through HBM
        s_q = T // ls.micro_batch
        per_head = gemm_seconds(chip, s_q, ls.kv_tokens, m.head_dim, "bf16" if dt == "fp8" else dt, eff, share)
        att_f = 2 * per_head * heads * ls.micro_batch
        att_b = 2 * att_f
        drop = 1 if ls.dropout else 0
        # per score, beyond the batched GEMMs' own output and input (inside their roofline): the fused scale + mask +
        # softmax reads and writes it (4), dropout reads it and writes it and a one-byte mask (5); backward the
        # softmax's reads the probabilities and their gradient and writes one (6), dropout's reads grad + mask (5)
        n_scores = heads * s_q * ls.kv_tokens * ls.micro_batch
        scores_f, scores_b = n_scores * (4 + 5 * drop), n_scores * (6 + 5 * drop)
    # memory-bound kernels: what this run's training code reads and writes (distlab.gpu.block_bytes, the eager
    # stacks counted op by op by distlab.gpu.kernel_bytes); the attention kernel's own traffic is inside its rate
    stack = FRAMEWORKS[ls.kernels][0]
    spec = LayerSpec(
        tokens=T,
        seq=max(1, T // ls.micro_batch),
        hidden=h,
        ffn=f,
        heads=m.heads,
        kv_heads=m.kv,
        mlp=m.mlp,
        norm=m.norm_kind,
        rope=m.rope,
        bias=m.mlp == "gelu",
        tp=t,
        sequence_parallel=ls.sequence_parallel,
        dropout=ls.dropout,
        attention="flash" if ls.attention == "flash" else "standard",
    )
    bytes_f, bytes_b = _layer_bytes(stack, spec)
    if dt == "fp8":  # every GEMM input cast to fp8 (and transposed for the weight gradient)
        bytes_f += FP8_CAST_BYTES * (h + h / t + h + f / t) * T
    hbm = chip.hbm_bytes_per_s * eff
    moved_f, moved_b = bytes_f + scores_f, bytes_b + scores_b
    return LayerTimes(
        gemm_forward=sum(s for _, s in forward),
        gemm_backward=backward,
        attention_forward=att_f,
        attention_backward=att_b,
        memory_forward=moved_f / hbm,
        memory_backward=moved_b / hbm,
        gemms=forward,
    )


def head_times(
    m: ModelShape,
    chip: GPU,
    tokens: int,
    tp: int,
    dtype: str,
    hbm_efficiency: float | None = None,
    kernels: str = "megatron",
    share: float | None = None,
):
    """(forward, backward) seconds of the output projection and the loss on the last stage, one micro-batch: the
    loss's memory-bound kernels as the run's code writes them (distlab.gpu.block_bytes.loss_bytes_per_logit)."""
    eff = MEMORY_EFFICIENCY if hbm_efficiency is None else hbm_efficiency
    dt = "bf16" if dtype == "fp8" else dtype  # the head stays in bf16 (Transformer Engine keeps it out of fp8)
    n = math.ceil(m.vocab / tp)
    fwd = gemm_seconds(chip, tokens, n, m.hidden, dt, eff, share)
    bwd = gemm_seconds(chip, tokens, m.hidden, n, dt, eff, share) + gemm_seconds(
        chip, m.hidden, n, tokens, dt, eff, share
    )
    loss_f, loss_b = loss_bytes_per_logit(FRAMEWORKS[kernels][1])
    hbm = chip.hbm_bytes_per_s * eff
    return fwd + tokens * n * loss_f / hbm, bwd + tokens * n * loss_b / hbm


def hardware_flops_per_layer(m: ModelShape, ls: LayerShape) -> tuple[float, float]:
    """(forward matmul FLOPs of the weight GEMMs, forward FLOPs of the attention core as run) of one layer on one
    GPU: what recomputation repeats."""
    h, t, T = m.hidden, ls.tp, ls.tokens
    q, kvw = m.q_width, m.kv * m.head_dim
    weights = 2 * h * q + 2 * h * kvw + (3 if m.mlp == "swiglu" else 2) * h * ls.ffn
    core = 4 * T * ls.kv_tokens * q / t * (0.5 if ls.attention == "flash" else 1.0)
    return 2 * T * weights / t, core
