"""What one transformer layer's memory-bound kernels read and write, per software stack: the planner's byte count
(distlab.planner.kernels prices these bytes at a share of HBM bandwidth).

Which kernels a layer runs is a fact of the code that trains it, not of the model: the same GPT layer is ten
kernels in Megatron-LM and seventeen in LLM Foundry's eager PyTorch, and a Llama layer in torchtitan's eager
PyTorch moves four times the bytes of the fused one, because its RMSNorm and rotary embeddings run in fp32 op by
op. So the count is per stack:

- `fused` (Megatron-LM's fused kernels, as Narayanan et al. 2021 Section 4.2 lists them: LayerNorm, bias + GeLU,
  bias + dropout + add, scale + mask + softmax; Transformer Engine's equivalents; torch.compile's fusions): every
  chain of element-wise ops is one kernel that reads its inputs and writes its outputs once. Hand-derived below,
  kernel by kernel.
- `llm-foundry`: LLM Foundry's MPT layer in eager PyTorch, with FlashAttention's variable-length interface (it
  gathers q, k, v to unpadded rows and scatters the output back, padding or not).
- `torchtitan`: torchtitan's Llama layer in eager PyTorch (fp32 RMSNorm and complex rotary embeddings op by op,
  K and V repeated to every query head).

The two eager stacks are counted op by op on the frameworks' own blocks by distlab.gpu.kernel_bytes, which claims
that these closed forms equal its counts exactly. Every function returns bytes for the whole micro-batch on one
GPU: `tokens` rows of the layer (micro-batch x sequence / cp), `seq` positions per sequence (the rotary table is
read once per position, not per token). Matmuls and the attention kernel are not here: they are priced from FLOP
rates (their own inputs and outputs are inside those rates).

Pure Python: the planner imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

STACKS = ("fused", "llm-foundry", "torchtitan")
LOSSES = ("fused-xentropy", "torch-fp32", "megatron-fp32")
FRAMEWORKS = {
    "megatron": ("fused", "megatron-fp32"),
    "llm-foundry": ("llm-foundry", "fused-xentropy"),
    "torchtitan": ("torchtitan", "torch-fp32"),
    "torchtitan-compile": ("fused", "torch-fp32"),
}
"""What a run's training code runs: (the layer's kernels, the loss's). Megatron-LM, Megatron-DeepSpeed, Megatron-Core
and NeMo (Transformer Engine) are `megatron`; torchtitan with torch.compile fuses each block (its loss stays eager,
torchtitan's train.py: 'compiling loss function causes CUDA errors, turning off for now')."""
BF16 = 2
FP32 = 4
INDEX = 8  # int64 row indices
CUDA_STAT_BYTES = 4
"""A CUDA norm kernel keeps its per-row statistics in fp32 (PyTorch's CPU kernel keeps them in the input dtype)."""


@dataclass(frozen=True)
class Kernel:
    """One memory-bound kernel of a layer (or one kind of them): bytes it moves in forward and in backward."""

    name: str
    forward: float
    backward: float


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """What the byte count of one layer on one GPU depends on."""

    tokens: int
    """Rows of the layer on this GPU: micro-batch x sequence / cp."""
    seq: int
    """Positions per sequence (the rotary table's length)."""
    hidden: int
    ffn: int
    """MLP inner width (per expert for MoE: the routed width one token passes through)."""
    heads: int
    kv_heads: int
    mlp: str = "gelu"
    norm: str = "layernorm"
    rope: bool = False
    bias: bool = True
    """Biased linears (GPT, MPT) or not (Llama)."""
    tp: int = 1
    sequence_parallel: bool = False
    dropout: bool = False
    attention: str = "flash"
    """flash (a fused kernel) or standard (the scores through HBM: distlab.planner.kernels counts those)."""
    stat_bytes: int = CUDA_STAT_BYTES

    def __post_init__(self) -> None:
        for name in ("tokens", "seq", "hidden", "ffn", "heads", "kv_heads", "tp"):
            if getattr(self, name) < 1:
                raise ValueError(f"layer: {name} must be positive, got {getattr(self, name)}")
        if self.mlp not in ("gelu", "swiglu") or self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"layer: mlp gelu/swiglu and norm layernorm/rmsnorm, not {self.mlp}/{self.norm}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def q_width(self) -> float:
        """Query width on this GPU (heads / tp)."""
        return self.hidden / self.tp

    @property
    def kv_width(self) -> float:
        """One of K or V's width on this GPU (a KV head is replicated when tp exceeds the KV heads)."""
        return max(self.kv_heads / self.tp, 1) * self.head_dim

    @property
    def res_rows(self) -> float:
        """Rows of the residual stream on this GPU: sequence parallelism splits them t ways."""
        return self.tokens / (self.tp if self.sequence_parallel and self.tp > 1 else 1)


# ---------------------------------------------------------------- the fused stack, kernel by kernel
def fused_kernels(s: LayerSpec) -> list[Kernel]:
    """Megatron-LM's fused layer (and Transformer Engine's, and torch.compile's): one kernel per element-wise chain.

    Forward: two norms (read x, write y, keep the row statistics), two bias + dropout + add (read the GEMM output and
    the residual, write the sum and, with dropout, a one-byte mask), the MLP activation (bias + GeLU: read and write
    f; SwiGLU: read gate and up, write one), rotary on q and k, and with standard attention the copy that makes the
    attention output contiguous (CoreAttention's permute().contiguous()). Backward: each norm reads dy and x and
    writes dx; dropout's backward reads the gradient and the mask; the activation reads dy and its input and writes
    dx (SwiGLU two of them); the bias gradients are sums over the rows of their output gradients; autograd adds the
    two gradients at every residual join and at the q, k, v split (a concatenation)."""
    r, T, h, f = s.res_rows, s.tokens, s.hidden, s.ffn / s.tp
    qw, kvw = s.q_width, s.kv_width
    stats = (2 if s.norm == "layernorm" else 1) * s.stat_bytes * r
    drop = 1 if s.dropout else 0
    out = [
        Kernel("norms", 2 * (2 * BF16 * r * h + stats), 2 * (3 * BF16 * r * h + stats)),
        Kernel(
            "bias + dropout + add",
            2 * (3 * BF16 + drop) * r * h,
            2 * ((2 * BF16 + 1) * r * h if s.dropout else 0),
        ),
        Kernel("residual joins (autograd add)", 0, 2 * 3 * BF16 * r * h),
    ]
    if s.mlp == "gelu":
        out.append(Kernel("bias + GeLU", 2 * BF16 * T * f, 3 * BF16 * T * f))
    else:
        out.append(Kernel("SwiGLU", 3 * BF16 * T * f, 5 * BF16 * T * f))
    if s.bias:
        out.append(Kernel("bias gradients (row sums)", 0, BF16 * (T * (qw + 2 * kvw + f) + 2 * r * h)))
    out.append(Kernel("q, k, v split (concatenated backward)", 0, 2 * BF16 * T * (qw + 2 * kvw)))
    if s.rope:
        out.append(Kernel("rotary (q, k)", 2 * BF16 * T * (qw + kvw), 2 * BF16 * T * (qw + kvw)))
    if s.attention == "standard":
        out.append(Kernel("attention output made contiguous", 2 * BF16 * T * qw, 0))
    return out


# ---------------------------------------------------------------- LLM Foundry's MPT layer, eager
def llm_foundry_kernels(s: LayerSpec) -> list[Kernel]:
    """llmfoundry MPTBlock (attn_impl flash, low_precision_layernorm, biases, GeLU MLP), op by op as counted by
    distlab.gpu.kernel_bytes: F.layer_norm x2, three gathers of q, k, v to unpadded rows (bert_padding.
    index_first_axis) and a zero-fill + index_put of the output back (pad_input), two residual adds, GeLU.
    Backward: layer-norm backward x2, the residual joins, GeLU backward, the bias sums, the gathers' backward
    (zero-fill + scatter) and pad_input's (a gather), and the q, k, v split's concatenation."""
    if s.mlp != "gelu" or s.norm != "layernorm" or s.tp != 1:
        raise ValueError("the llm-foundry stack is counted for MPT's layer (GeLU, LayerNorm, no TP)")
    T, h, f = s.tokens, s.hidden, s.ffn
    kv = s.kv_width
    qkv = h + 2 * kv
    norm_f = 2 * BF16 * T * h + 2 * BF16 * h + 2 * s.stat_bytes * T  # read x, weight, bias; write y, mean, rstd
    norm_b = 3 * BF16 * T * h + 4 * BF16 * h + 2 * s.stat_bytes * T  # read dy, x, stats, w, b; write dx, dw, db
    return [
        Kernel("layer norms", 2 * norm_f, 2 * norm_b),
        Kernel("residual adds / joins", 2 * 3 * BF16 * T * h, 2 * 3 * BF16 * T * h),
        Kernel("GeLU", 2 * BF16 * T * f, 3 * BF16 * T * f),
        Kernel("bias gradients (row sums)", 0, BF16 * (T * (qkv + h + f + h) + qkv + h + f + h)),
        Kernel("unpad q, k, v (gather)", 2 * BF16 * T * qkv + 3 * INDEX * T, 3 * BF16 * T * qkv + 3 * INDEX * T),
        Kernel("pad the output (zeros + index_put)", 3 * BF16 * T * h + INDEX * T, 2 * BF16 * T * h + INDEX * T),
        Kernel("q, k, v split (concatenated backward)", 0, 2 * BF16 * T * qkv),
    ]


# ---------------------------------------------------------------- torchtitan's Llama layer, eager
def torchtitan_kernels(s: LayerSpec) -> list[Kernel]:
    """torchtitan TransformerBlock (norm_type rmsnorm, eager), op by op as counted by distlab.gpu.kernel_bytes.

    RMSNorm in fp32: x.float() (read 2, write 4 per element), pow (4 + 4), mean (4 + a row), + eps and rsqrt (rows),
    x * rstd (4 + 4), back to bf16 (4 + 2), times the weight (2 + 2): 36 bytes per element forward; its backward,
    by autograd's formulas op by op, 92. Rotary on q and k: to fp32 (6 per element), a complex multiply by the
    position's table (4 + 4, the table read once per position: 4 bytes per position per head dimension), back to
    bf16 (6); backward the same and a copy of the conjugated table. K and V are repeated to every query head (a copy;
    a sum backward). SwiGLU: silu (2 + 2 per element), the product (4 + 2); backward two products and silu's
    backward. Autograd adds gradients at the two residual joins, the two inputs of the MLP's gate and up projections
    and the three of q, k and v."""
    if s.mlp != "swiglu" or s.norm != "rmsnorm" or not s.rope:
        raise ValueError("the torchtitan stack is counted for the Llama layer (SwiGLU, RMSNorm, rotary)")
    r, T, h, f = s.res_rows, s.tokens, s.hidden, s.ffn / s.tp
    qw, kvw = s.q_width, s.kv_width
    table = FP32 * s.seq * s.head_dim  # complex64 cos + i sin, d/2 per position: 4 s d bytes
    rep = qw > kvw
    out = [
        Kernel("RMSNorm in fp32 (x2)", 2 * (36 * r * h + 24 * r + BF16 * h), 2 * (92 * r * h + 40 * r + 2 * BF16 * h)),
        Kernel("residual adds / joins", 2 * 3 * BF16 * r * h, 2 * 3 * BF16 * r * h),
        Kernel("SwiGLU (silu, product)", 10 * T * f, 18 * T * f),
        Kernel("gradient joins (gate/up; q, k, v)", 0, 3 * 3 * BF16 * T * h),
        Kernel("rotary via complex64 (q, k)", 20 * T * (qw + kvw) + 2 * table, 20 * T * (qw + kvw) + 6 * table),
    ]
    if rep:
        out.append(Kernel("repeat K, V to every head", 2 * BF16 * T * (qw + kvw), 2 * BF16 * T * (qw + kvw)))
    return out


KERNELS = {"fused": fused_kernels, "llm-foundry": llm_foundry_kernels, "torchtitan": torchtitan_kernels}


def layer_kernels(stack: str, s: LayerSpec) -> list[Kernel]:
    if stack not in KERNELS:
        raise ValueError(f"kernels must be one of {', '.join(STACKS)}, not {stack!r}")
    return KERNELS[stack](s)


def layer_bytes(stack: str, s: LayerSpec) -> tuple[float, float]:
    """(forward, backward) bytes of one layer's memory-bound kernels on one GPU for one micro-batch."""
    ks = layer_kernels(stack, s)
    return sum(k.forward for k in ks), sum(k.backward for k in ks)


# ---------------------------------------------------------------- the loss over the logits
LOSS_BYTES = {
    # flash-attn's fused cross-entropy (xentropy / Triton): reads the bf16 logits once forward; backward reads them
    # and writes their gradient
    "fused-xentropy": (BF16, 2 * BF16),
    # F.cross_entropy(logits.float()): the cast (2 + 4), log_softmax (4 + 4); backward nll's zero-filled gradient (4),
    # log_softmax's backward (4 + 4 + 4), the cast back (4 + 2)
    "torch-fp32": (BF16 + FP32 + 2 * FP32, FP32 + 3 * FP32 + FP32 + BF16),
    # Megatron's vocab-parallel cross-entropy on output.float(): the cast (2 + 4), max (4), subtract in place (4 + 4),
    # exp in place (4 + 4), sum (4), divide in place (4 + 4); backward: scale in place (4 + 4), the cast back (4 + 2)
    "megatron-fp32": (BF16 + FP32 + FP32 + 2 * FP32 + 2 * FP32 + FP32 + 2 * FP32, 2 * FP32 + FP32 + BF16),
}


def loss_bytes_per_logit(kind: str) -> tuple[float, float]:
    """(forward, backward) bytes per logit of the loss's memory-bound kernels (per-row terms left out: a row is a
    vocabulary of logits)."""
    if kind not in LOSS_BYTES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}, not {kind!r}")
    return LOSS_BYTES[kind]
