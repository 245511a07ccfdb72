"""Activation memory of a transformer layer (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", https://arxiv.org/abs/2205.05198, Section 4, Table 2).

Convention of the paper: 16-bit activations, dropout masks at 1 byte per element, s sequence length,
b micro-batch, h hidden size, a attention heads, t tensor-parallel size, a GPT block (LayerNorm,
attention, LayerNorm, a 4h GeLU MLP, dropout after attention, after the MLP and on the attention
probabilities). It leaves out what does not grow with h: LayerNorm statistics and the causal mask.

`block_terms` is the closed form for *our* block (distlab.models.gpt.Block in 16 bits), term by term beside
the paper's; `distlab.memory.activation_memory` counts the real block's saved tensors against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.core.cli import MAX_GPUS, MAX_TOKENS, MAX_WIDTH, command, emit, parser, positive
from distlab.models.shapes import ModelShape

RECOMPUTE = ("none", "selective", "full")


def published_bytes_per_layer(s: int, b: int, h: int, a: int) -> float:
    """sbh(34 + 5as/h): no parallelism, no recompute (the paper's Eq. 1)."""
    return s * b * h * (34 + 5 * a * s / h)


def activation_bytes_per_layer(
    seq: int,
    batch: int,
    hidden: int,
    heads: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Bytes of activations one layer keeps for backward, per GPU (the paper's Table 2).

    none:       sbh(10 + 24/t + 5as/(ht))       (with sequence parallelism: sbh/t (34 + 5as/h))
    selective:  sbh(10 + 24/t)                   (with sequence parallelism: sbh/t * 34)
    full:       2sbh                             (the layer input only; /t with sequence parallelism)
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {recompute!r}")
    for name, v in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads), ("tp", tp)):
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
    sbh, t = seq * batch * hidden, tp
    attention_core = 5 * heads * seq / (hidden * t)  # softmax input/output and dropout mask, O(s^2)
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if sequence_parallel:
        return sbh / t * 34 + (sbh * attention_core if recompute == "none" else 0)
    return sbh * (10 + 24 / t) + (sbh * attention_core if recompute == "none" else 0)


ATTENTION = ("flash", "eager")  # flash: the s x s scores never reach HBM; eager: they are saved for backward


def model_activation_bytes_per_layer(
    m: ModelShape,
    seq: int,
    batch: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    attention: str = "flash",
) -> float:
    """Bytes one layer of model `m` keeps for backward, per GPU: the one function the calculator, the CLI, the
    planner and the worked plans size activations with, chosen by the model's architecture.

    Today it is Korthikanti's GPT block for every model, FlashAttention counted as dropping the s x s terms
    (what selective recompute drops); the architecture-exact closed forms (SwiGLU, GQA, no dropout, MoE) replace
    its inside, not its signature."""
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION)}, not {attention!r}")
    effective = "selective" if (attention == "flash" and recompute == "none") else recompute
    return activation_bytes_per_layer(
        seq, batch, m.hidden, m.heads, tp=tp, sequence_parallel=sequence_parallel, recompute=effective
    )


# ---------------------------------------------------------------- our block, term by term
@dataclass(frozen=True)
class Term:
    """One group of tensors a block keeps for backward."""

    module: str
    """Where it is saved: the submodule of distlab.models.gpt.Block running at the time."""
    what: str
    """Which tensors, and for which backward."""
    paper: str
    """The paper's term (Section 4.1), or "—" where the paper leaves it out."""
    paper_bytes: int
    """Bytes of the paper's term."""
    bytes: int
    """Bytes our block really keeps."""
    recomputed: bool = False
    """Part of the attention core, which selective recompute drops (Section 5)."""


def block_terms(
    s: int,
    b: int,
    h: int,
    a: int,
    *,
    dropout: bool = True,
    ffn: int | None = None,
    act_bytes: int = 2,
    mask_bytes: int = 1,
    norm_stat_bytes: int = 2,
) -> list[Term]:
    """Every tensor our GPT block (distlab.models.gpt.Block) saves for backward, by module.

    act_bytes: bytes of an activation element (2 for bf16/fp16). mask_bytes: a dropout mask element
    (1: a bool mask, as PyTorch's CUDA dropout and Megatron keep). norm_stat_bytes: LayerNorm's saved
    mean and 1/std per row: PyTorch keeps them in the input dtype on CPU (2) and in fp32 on CUDA (4).
    Without dropout the block keeps no masks, and the attention probabilities that x V needs are the
    softmax output itself (one buffer, counted once).
    """
    f = ffn or 4 * h
    sbh, sb, e = s * b * h, s * b, act_bytes
    att = a * s * s * b  # elements of the attention matrix, all heads
    d = 1 if dropout else 0
    return [
        Term("ln1", "input", "2sbh", 2 * sbh, e * sbh),
        Term("ln1", "mean and 1/std (one each per row)", "—", 0, 2 * sb * norm_stat_bytes),
        Term("attn.qkv", "input (LayerNorm output)", "2sbh", 2 * sbh, e * sbh),
        Term("attn", "Q and K, for QKᵀ", "4sbh", 4 * sbh, 2 * e * sbh),
        Term("attn", "causal mask (bool, s × s, shared by batch and heads)", "—", 0, s * s, True),
        Term("attn", "softmax output", "2as²b", 2 * att, e * att, True),
        Term("attn.attn_drop", "dropout mask on the probabilities", "as²b", d * att, d * mask_bytes * att, True),
        Term("attn", "dropped-out probabilities, for × V", "2as²b", 2 * att * d, e * att * d, True),
        Term("attn", "V, for × V", "2sbh", 2 * sbh, e * sbh),
        Term("attn.proj", "input (attention output)", "2sbh", 2 * sbh, e * sbh),
        Term("attn.resid_drop", "dropout mask", "sbh", d * sbh, d * mask_bytes * sbh),
        Term("ln2", "input", "2sbh", 2 * sbh, e * sbh),
        Term("ln2", "mean and 1/std (one each per row)", "—", 0, 2 * sb * norm_stat_bytes),
        Term("mlp.up", "input (LayerNorm output)", "2sbh", 2 * sbh, e * sbh),
        Term("mlp", "GeLU input", "8sbh", 2 * s * b * 4 * h, e * sb * f),
        Term("mlp.down", "input (GeLU output)", "8sbh", 2 * s * b * 4 * h, e * sb * f),
        Term("mlp.drop", "dropout mask", "sbh", d * sbh, d * mask_bytes * sbh),
    ]


def block_bytes(s: int, b: int, h: int, a: int, *, recompute: str = "none", **kw) -> int:
    """Our block's saved activation bytes: everything (none), without the attention core (selective),
    or the layer input alone (full)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {recompute!r}")
    if recompute == "full":
        return kw.get("act_bytes", 2) * s * b * h
    return sum(t.bytes for t in block_terms(s, b, h, a, **kw) if recompute == "none" or not t.recomputed)


def block_param_bytes(h: int, ffn: int | None = None, act_bytes: int = 2) -> int:
    """Parameter bytes the block's backward refers to: every weight (the linears' input gradients
    need them) and the LayerNorm weights and biases; linear biases are not needed."""
    f = ffn or 4 * h
    return act_bytes * (2 * 2 * h + 3 * h * h + h * h + 2 * h * f)


def stack_peak_bytes(layers: int, segment: int, checkpointed: int, layer_bytes: int, input_bytes: int) -> int:
    """Peak bytes saved for backward by a stack of `layers` equal layers whose first `checkpointed` are
    checkpointed in segments of `segment` layers (the last one shorter when it does not divide); the rest
    run plainly.

    After the forward each segment keeps its input and each plain layer its layer_bytes. Backward
    releases the plain layers' saves as it passes them, then takes the segments from the last: it
    releases a segment's input, runs the segment's forward again (saving layer_bytes per layer) and
    back-propagates through it. While segment j is recomputed the inputs of segments 1..j-1 are still
    held:  peak = max(after the forward, max_j (j - 1) input_bytes + len_j layer_bytes).
    """
    if checkpointed == 0:
        return layers * layer_bytes
    sizes = [min(segment, checkpointed - i) for i in range(0, checkpointed, segment)]
    after_forward = len(sizes) * input_bytes + (layers - checkpointed) * layer_bytes
    return max([after_forward] + [j * input_bytes + n * layer_bytes for j, n in enumerate(sizes)])


def layer_forward_flops(s: int, b: int, h: int) -> dict[str, int]:
    """Matmul FLOPs of one GPT layer's forward (ffn 4h): the linears 24sbh², the attention core 4bs²h
    (QKᵀ and × V). Used to express recompute counts as extra compute."""
    return {"layer": 24 * s * b * h * h + 4 * b * s * s * h, "core": 4 * b * s * s * h}


FORMULAS = {  # the paper's per-layer expression for each row
    (False, "none"): "sbh(10 + 24/t + 5as/(ht))",
    (True, "none"): "sbh/t (34 + 5as/h)",
    (False, "selective"): "sbh(10 + 24/t)",
    (True, "selective"): "34 sbh/t",
    (False, "full"): "2sbh",
    (True, "full"): "2sbh/t",
}


# ---------------------------------------------------------------- the calculator
CONVENTION = (
    "Convention (Korthikanti et al. 2022, Table 2): a GPT layer (LayerNorm, attention, LayerNorm, 4h "
    "GeLU MLP) with 16-bit activations and dropout (1-byte masks); LayerNorm statistics, the causal "
    "mask, embeddings and the loss are left out. Per GPU: tensor parallelism splits heads t ways; "
    "sequence parallelism also splits what tensor parallelism leaves whole. Bytes are exact; 1 GB = 1e9 B."
)


@command("activations", "activation bytes per layer and per GPU (Korthikanti et al. 2022, Table 2)")
def activations_command(argv: list[str]) -> int:
    p = parser(
        "activations",
        "Activation bytes a transformer keeps for backward, per layer and in total per GPU.\n\n" + CONVENTION,
    )
    p.add_argument("--layers", type=positive(int, MAX_WIDTH), required=True, help="transformer layers L (on this GPU)")
    p.add_argument("--hidden", type=positive(int, MAX_WIDTH), required=True, help="hidden size h")
    p.add_argument("--heads", type=positive(int, MAX_WIDTH), required=True, help="attention heads a")
    p.add_argument("--seq", type=positive(int, MAX_TOKENS), required=True, help="sequence length s")
    p.add_argument("--batch", type=positive(int, MAX_TOKENS), required=True, help="micro-batch b (sequences)")
    p.add_argument("--tp", type=positive(int, MAX_GPUS), default=1, help="tensor-parallel size t (default 1)")
    p.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism (with --tp)")
    p.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default="none",
        help="none (default), selective (attention core) or full (keep layer inputs only)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    if args.hidden % args.heads:
        raise ValueError(f"--hidden ({args.hidden}) must be divisible by --heads ({args.heads})")
    if args.heads % args.tp:
        raise ValueError(f"--heads ({args.heads}) must be divisible by --tp ({args.tp})")
    per_layer = activation_bytes_per_layer(
        args.seq,
        args.batch,
        args.hidden,
        args.heads,
        tp=args.tp,
        sequence_parallel=args.sequence_parallel,
        recompute=args.recompute,
    )
    per_layer = int(per_layer) if float(per_layer).is_integer() else per_layer
    total = args.layers * per_layer
    formula = FORMULAS[(args.sequence_parallel, args.recompute)]
    out = {
        "layers": args.layers,
        "hidden": args.hidden,
        "heads": args.heads,
        "seq": args.seq,
        "batch": args.batch,
        "tp": args.tp,
        "sequence_parallel": args.sequence_parallel,
        "recompute": args.recompute,
        "formula": formula,
        "bytes_per_layer": per_layer,
        "total_bytes": total,
    }
    text = (
        f"per layer  {per_layer:,} B ({per_layer / 1e9:.3g} GB)   {formula}\n"
        f"per GPU    {total:,} B ({total / 1e9:.3g} GB)   {args.layers} layers\n"
        "16-bit activations with dropout (Korthikanti et al. 2022, Table 2); see --help for the convention"
    )
    emit(out, args.json, text)
    return 0
