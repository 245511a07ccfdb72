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

import argparse
from dataclasses import dataclass, replace

from distlab.core.cli import MAX_GPUS, MAX_TOKENS, MAX_WIDTH, command, emit, parser, positive
from distlab.memory.layer_activations import layer_bytes, output_terms
from distlab.models.shapes import BlockShape, ModelShape

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
    full:       2sbh                             (the layer input only; Table 2 prints 2sbh for every row; the
                                                 /t with sequence parallelism is this site's extension: the
                                                 layer input is then split t ways by the sequence)
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


def model_block(m: ModelShape, *, moe: bool | None = None, dropout: bool | None = None) -> BlockShape:
    """One layer of `m` as distlab.models.decoder builds it; `dropout` overrides the model's own."""
    block = m.block(moe=moe)
    return block if dropout is None else replace(block, dropout=dropout)


def model_activation_bytes_per_layer(
    m: ModelShape,
    seq: int,
    batch: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    attention: str = "flash",
    dropout: bool | None = None,
    capacity_factor: float | None = None,
) -> int:
    """Bytes one layer of model `m` keeps for backward, per GPU: the one function the calculator, the CLI, the
    planner and the worked plans size activations with.

    Architecture-exact (distlab.memory.layer_activations, checked tensor by tensor on counted blocks by the
    experiment activation-memory-models): the model's MLP (SwiGLU or GeLU, its own width), its key/value heads,
    its norm, dropout as the model trains (or `dropout`), FlashAttention ("flash") or the s x s matrices
    materialised ("eager"; "standard" and "sdpa" are accepted as the planner's and torch's names), an MoE layer
    with top-k routing, dropless or with a `capacity_factor`. For an MoE model with leading dense layers it is
    the heavier of the two kinds of layer (what one layer may need); `model_activation_bytes` sums them.
    """
    kinds = [True, False] if m.experts and m.dense_layers else [None]
    return max(
        layer_bytes(
            model_block(m, moe=kind, dropout=dropout),
            seq,
            batch,
            attention=attention,
            recompute=recompute,
            tp=tp,
            sequence_parallel=sequence_parallel,
            capacity_factor=capacity_factor,
        )
        for kind in kinds
    )


def model_activation_bytes(
    m: ModelShape, seq: int, batch: int, *, layers: int | None = None, dropout: bool | None = None, **kw
) -> int:
    """Bytes all of `m`'s layers (or its first `layers`) keep for backward, per GPU: dense and MoE layers each
    with their own closed form (keyword arguments as model_activation_bytes_per_layer)."""
    layers = m.layers if layers is None else layers
    if not m.experts:
        return layers * layer_bytes(model_block(m, dropout=dropout), seq, batch, **kw)
    dense = min(layers, m.dense_layers)
    moe = layer_bytes(model_block(m, moe=True, dropout=dropout), seq, batch, **kw)
    plain = layer_bytes(model_block(m, moe=False, dropout=dropout), seq, batch, **kw) if dense else 0
    return dense * plain + (layers - dense) * moe


def logits_bytes(m: ModelShape, seq: int, batch: int, *, tp: int = 1, sequence_parallel: bool = False) -> int:
    """What the final norm, the output head and the loss keep for backward (s·b·V·4 bytes of fp32
    log-probabilities dominate at a 128k vocabulary): distlab.memory.layer_activations.output_terms."""
    terms = output_terms(m.hidden, m.vocab, seq, batch, norm=m.norm_kind, tp=tp, sequence_parallel=sequence_parallel)
    return sum(x.bytes for x in terms)


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


SITE_EXTENSIONS = {(True, "full")}  # rows the paper does not print: Table 2 gives full recompute as 2sbh
FORMULAS = {  # the paper's per-layer expression for each row (with SITE_EXTENSIONS, this site's)
    (False, "none"): "sbh(10 + 24/t + 5as/(ht))",
    (True, "none"): "sbh/t (34 + 5as/h)",
    (False, "selective"): "sbh(10 + 24/t)",
    (True, "selective"): "34 sbh/t",
    (False, "full"): "2sbh",
    (True, "full"): "2sbh/t",
}


# ---------------------------------------------------------------- the calculator
CONVENTION = (
    "Architecture-exact (distlab.memory.layer_activations, checked tensor by tensor against counted blocks on "
    "chapter 3): 16-bit activations, fp32 norm statistics, 1-byte dropout masks; the model's MLP (SwiGLU or "
    "GeLU) and width, its key/value heads, its norm, dropout as the model trains; FlashAttention keeps O and a "
    "log-sum-exp per row instead of the s x s matrices. Without --model the layer is Korthikanti et al.'s "
    "GPT block (LayerNorm, 4h GeLU MLP, dropout, eager attention), and the paper's Table 2 value is printed "
    "beside it. Embeddings, the logits and the loss are left out. Per GPU: tensor parallelism splits heads "
    "and the MLP t ways; sequence parallelism also splits what tensor parallelism leaves whole. Bytes are "
    "exact; 1 GB = 1e9 B."
)


def _cli_model(args) -> ModelShape:
    """The model the flags describe: --model's, with any flag given overriding it; or a custom one."""
    from distlab.models.shapes import named

    given = {
        k: getattr(args, k)
        for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "mlp", "norm", "dropout", "experts", "top_k")
        if getattr(args, k) is not None
    }
    if args.model:
        base = named(args.model)
        fields = {"layers", "hidden", "heads", "kv_heads", "ffn", "mlp", "norm", "dropout", "experts", "top_k"}
        row = {f: getattr(base, f) for f in fields} | {"vocab": base.vocab, "seq": base.seq, "name": base.name}
        row |= {"moe_ffn": base.moe_ffn, "dense_layers": base.dense_layers}
        row |= {"norm": base.norm_kind, "dropout": base.trains_with_dropout}  # the model's own, not a family's
        if "hidden" in given or "heads" in given:
            row["kv_heads"] = given.get("kv_heads")  # a new head count: KV heads default to it again
        row |= given
        if row["hidden"] % row["heads"]:
            raise ValueError(f"--hidden ({row['hidden']}) must be divisible by --heads ({row['heads']})")
        return ModelShape(**row)
    missing = [f"--{k}" for k in ("layers", "hidden", "heads") if k not in given]
    if missing:
        raise ValueError(f"give --model NAME, or the shape: {', '.join(missing)} missing")
    if given["hidden"] % given["heads"]:
        raise ValueError(f"--hidden ({given['hidden']}) must be divisible by --heads ({given['heads']})")
    mlp = given.get("mlp", "swiglu" if given.get("experts") else "gelu")  # else Korthikanti et al.'s GPT block
    given.setdefault("ffn", 4 * given["hidden"])
    return ModelShape(name="custom", vocab=1, **({"mlp": mlp} | given))


@command("activations", "activation bytes per layer and per GPU, architecture-exact (Llama, GPT, MoE)")
def activations_command(argv: list[str]) -> int:
    from distlab.core.cli import number
    from distlab.memory.layer_activations import formula, saved_tensors
    from distlab.models.shapes import catalog, named

    p = parser(
        "activations",
        "Activation bytes a transformer keeps for backward, per layer and in total per GPU.\n\n" + CONVENTION,
    )
    p.add_argument("--model", choices=list(catalog()), help="a named model; its shape and training defaults")
    p.add_argument("--layers", type=positive(int, MAX_WIDTH), help="transformer layers L (on this GPU)")
    p.add_argument("--hidden", type=positive(int, MAX_WIDTH), help="hidden size h")
    p.add_argument("--heads", type=positive(int, MAX_WIDTH), help="attention heads a")
    p.add_argument("--kv-heads", type=positive(int, MAX_WIDTH), help="key/value heads g (default: the model's, or a)")
    p.add_argument("--ffn", type=positive(int, MAX_WIDTH), help="MLP width f (default: the model's, or 4h)")
    p.add_argument("--mlp", choices=("gelu", "swiglu"), help="MLP type (default: the model's, or gelu)")
    p.add_argument("--norm", choices=("rmsnorm", "layernorm"), help="norm (default: the MLP family's)")
    p.add_argument(
        "--dropout",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="dropout masks (default: as the model trains: Llama without, GPT with)",
    )
    p.add_argument("--experts", type=positive(int, MAX_WIDTH), help="routed experts E of an MoE layer")
    p.add_argument("--top-k", type=positive(int, MAX_WIDTH), help="experts per token k (with --experts)")
    p.add_argument(
        "--capacity-factor",
        type=number(float, minimum=0, strict_minimum=True, maximum=MAX_WIDTH),
        help="MoE expert capacity factor cf (default: dropless)",
    )
    p.add_argument("--seq", type=positive(int, MAX_TOKENS), help="sequence length s (default: the model's)")
    p.add_argument("--batch", type=positive(int, MAX_TOKENS), default=1, help="micro-batch b (sequences, default 1)")
    p.add_argument("--tp", type=positive(int, MAX_GPUS), default=1, help="tensor-parallel size t (default 1)")
    p.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism (with --tp)")
    p.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default="none",
        help="none (default), selective (attention core) or full (keep layer inputs only)",
    )
    p.add_argument(
        "--attention",
        choices=ATTENTION,
        help="flash (FlashAttention: no s x s matrices) or eager (default: flash for Llama-family models, "
        "eager for GPT-family ones)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    if args.experts is not None and args.top_k is None and not args.model:
        raise ValueError("--experts needs --top-k")
    m = _cli_model(args)
    seq = args.seq or (m.seq if args.model else None)
    if seq is None:
        raise ValueError("give --seq (or --model NAME, whose training sequence is the default)")
    if m.heads % args.tp:
        raise ValueError(f"--heads ({m.heads}) must be divisible by --tp ({args.tp})")
    family = named(args.model).mlp if args.model else m.mlp  # the named model's kind sets the default
    attention = args.attention or ("flash" if family == "swiglu" else "eager")
    kw = dict(
        tp=args.tp,
        sequence_parallel=args.sequence_parallel,
        recompute=args.recompute,
        attention=attention,
        capacity_factor=args.capacity_factor,
    )
    block = m.block()
    terms = saved_tensors(block, seq, args.batch, **kw)
    per_layer = model_activation_bytes_per_layer(m, seq, args.batch, **kw)
    total = model_activation_bytes(m, seq, args.batch, **kw)
    published = activation_bytes_per_layer(
        seq,
        args.batch,
        m.hidden,
        m.heads,
        tp=args.tp,
        sequence_parallel=args.sequence_parallel,
        recompute=args.recompute,
    )
    published = int(published) if float(published).is_integer() else published
    out = {
        "model": args.model or "custom",
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.kv,
        "ffn": block.ffn,
        "mlp": m.mlp,
        "norm": m.norm_kind,
        "dropout": block.dropout,
        "attention": attention,
        "seq": seq,
        "batch": args.batch,
        "tp": args.tp,
        "sequence_parallel": args.sequence_parallel,
        "recompute": args.recompute,
        "formula": formula(terms),
        "bytes_per_layer": per_layer,
        "total_bytes": total,
        "published_formula": FORMULAS[(args.sequence_parallel, args.recompute)],
        "published_bytes_per_layer": published,
        "terms": [{"module": x.module, "what": x.what, "notation": x.notation, "bytes": x.bytes} for x in terms],
    }
    if m.experts:
        out |= {"experts": m.experts, "top_k": m.top_k, "capacity_factor": args.capacity_factor}
    text = (
        f"per layer  {per_layer:,} B ({per_layer / 1e9:.3g} GB)   {out['formula']}\n"
        f"per GPU    {total:,} B ({total / 1e9:.3g} GB)   {m.layers} layers\n"
        f"Korthikanti et al. Table 2 ({out['published_formula']}): {published:,} B per layer, for its GPT block"
        + (
            " (/t: this site's extension; Table 2 gives 2sbh)"
            if (args.sequence_parallel, args.recompute) in SITE_EXTENSIONS
            else ""
        )
        + "\n"
        f"{m.name}: {m.mlp}, {m.kv} KV heads, {m.norm_kind}, dropout {'on' if block.dropout else 'off'}, "
        f"{attention} attention; see --help for the convention"
    )
    emit(out, args.json, text)
    return 0
