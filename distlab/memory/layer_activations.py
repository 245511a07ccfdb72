"""What one decoder layer keeps for backward, tensor by tensor, for any architecture distlab.models.decoder
builds: the closed form the experiment `activation-memory-models` checks against the counted bytes, and the one
every activation estimate on the site uses (distlab.memory.activations.model_activation_bytes_per_layer).

Notation as Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198, Section 4): s sequence, b micro-batch,
h hidden, a attention heads, t tensor-parallel size; and g key/value heads, d = h/a the head dimension, f the
MLP width, E experts, k experts per token, N the token-slots the experts process. 16-bit activations (2 bytes),
fp32 norm statistics and softmax-over-experts (4 bytes, as fused norm kernels and routers keep them), 1-byte
dropout masks, int64 indices (8 bytes).

Each `Saved` is one buffer autograd holds, named by the module that saves it first. Under tensor parallelism
(Megatron) a rank keeps its a/t query heads, ⌈g/t⌉ key/value heads (one replicated head when t > g) and f/t of
the MLP; what sits on the residual stream (norm inputs and statistics, the projections' inputs, the dropout
masks after attention and MLP) is whole on every rank, and split t ways by the sequence with sequence
parallelism, which keeps a column-parallel linear's input as the local shard and all-gathers it again in
backward (Korthikanti et al., Section 4.2.2).

With FlashAttention and dropout the kernel regenerates the mask in backward from its RNG seed and offset (two
scalars, left out here); the s × s terms are gone either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distlab.models.shapes import BlockShape

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "eager")
ALIASES = {"sdpa": "flash", "standard": "eager"}  # the torch block's and the planner's names
ACT, STAT, MASK, INDEX = 2, 4, 1, 8  # bytes: a 16-bit activation, an fp32 statistic, a bool, an int64


@dataclass(frozen=True)
class Saved:
    """One buffer a layer keeps for backward."""

    module: str
    """The module that saves it first (distlab.models.decoder's names; "mlp.experts" for any expert)."""
    what: str
    """Which tensor, and which backward needs it."""
    notation: str
    """Its bytes in Korthikanti et al.'s symbols, at t = 1."""
    bytes: int
    """Its bytes for the shape, parallelism and recompute asked for (one rank)."""
    core: bool = False
    """Inside the attention core: what selective recompute drops."""


def attention_kind(attention: str) -> str:
    kind = ALIASES.get(attention, attention)
    if kind not in ATTENTION:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION)}, not {attention!r}")
    return kind


def moe_slots(tokens: int, experts: int, top_k: int, capacity_factor: float | None) -> int:
    """N: token-slots the experts process. Dropless, exactly T·k; with a capacity, E·⌈cf·T·k/E⌉ (every expert
    padded to its capacity, distlab.models.moe)."""
    if capacity_factor is None:
        return tokens * top_k
    if not capacity_factor > 0:
        raise ValueError(f"capacity factor must be positive, got {capacity_factor}")
    return experts * math.ceil(capacity_factor * tokens * top_k / experts)


def _check(block: BlockShape, s: int, b: int, tp: int, sequence_parallel: bool, recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {recompute!r}")
    for name, v in (("seq", s), ("batch", b), ("tp", tp)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive whole number, got {v!r}")
    if block.heads % tp:
        raise ValueError(f"heads ({block.heads}) must be divisible by TP ({tp})")
    if block.kv_heads % tp and tp % block.kv_heads:
        raise ValueError(f"kv heads ({block.kv_heads}) and TP ({tp}) must divide one another")
    if block.ffn % tp:
        raise ValueError(f"MLP width ({block.ffn}) must be divisible by TP ({tp})")
    if sequence_parallel and s % tp:
        raise ValueError(f"sequence ({s}) must be divisible by TP ({tp}) with sequence parallelism")


def saved_tensors(
    block: BlockShape,
    s: int,
    b: int,
    *,
    attention: str = "flash",
    recompute: str = "none",
    tp: int = 1,
    sequence_parallel: bool = False,
    capacity_factor: float | None = None,
    loads: list[int] | None = None,
) -> list[Saved]:
    """Every buffer one layer keeps for backward on one rank, in the order the block saves them.

    recompute "full" keeps the layer's input only; "selective" checkpoints the attention core, which then keeps
    its inputs (q and k after RoPE, v) instead of what is inside it. `loads`: the slots each expert processed
    (the router's split); without it the experts' terms are summed over experts (their total is N either way)."""
    kind = attention_kind(attention)
    _check(block, s, b, tp, sequence_parallel, recompute)
    t, h, d, f = tp, block.hidden, block.head_dim, block.ffn // tp
    heads, kv = block.heads // t, max(block.kv_heads // t, 1)
    rows = s * b // t if sequence_parallel else s * b  # tokens on the residual stream of one rank
    seq = "/t" if sequence_parallel and t > 1 else ""
    if recompute == "full":
        return [Saved("checkpoint", "layer input (the checkpoint's only save)", f"2sbh{seq}", ACT * rows * h)]
    qd, kvd = heads * d, kv * d  # this rank's query and key/value widths
    out: list[Saved] = []

    def norm(name: str, what: str) -> None:
        out.append(Saved(name, f"input ({what})", f"2sbh{seq}", ACT * rows * h))
        stats = ("1/rms",) if block.norm == "rmsnorm" else ("mean", "1/std")
        out.extend(Saved(name, f"{st} per row (fp32)", f"4sb{seq}", STAT * rows) for st in stats)

    norm("attn_norm", "the layer input")
    sb, ht = s * b, "/t" if t > 1 else ""  # ht: split by heads or by the MLP width
    if block.mla:
        out += _latent_attention(block, s, b, rows=rows, seq=seq, t=t, kind=kind, recompute=recompute)
    else:
        out.append(
            Saved("attn.q_proj", "input of q, k, v projections (the norm's output)", f"2sbh{seq}", ACT * rows * h)
        )
        kvn = ("2sbh·g/a" if block.kv_heads != block.heads else "2sbh") + ht
        if t > block.kv_heads:
            kvn = "2sbd"  # one key/value head per rank, replicated (t = g splits them: 2sbh·g/a/t, the same bytes)
        if recompute == "selective":  # the checkpointed core keeps its inputs
            q_what = "q after RoPE" if block.rope else "q"
            k_what = "k after RoPE" if block.rope else "k"
            out += [
                Saved("attn.core", f"{q_what} (checkpoint input)", "2sbh" + ht, ACT * sb * qd),
                Saved("attn.core", f"{k_what} (checkpoint input)", kvn, ACT * sb * kvd),
                Saved("attn.core", "v (checkpoint input)", kvn, ACT * sb * kvd),
                Saved("attn.o_proj", "input (the attention output)", "2sbh" + ht, ACT * sb * qd),
            ]
        elif kind == "flash":
            out += [
                Saved("attn.core", "K, for the kernel's backward", kvn, ACT * sb * kvd, True),
                Saved("attn.core", "Q", "2sbh" + ht, ACT * sb * qd, True),
                Saved("attn.core", "V", kvn, ACT * sb * kvd, True),
                Saved("attn.core", "log-sum-exp per row and head (fp32)", "4abs" + ht, STAT * b * heads * s, True),
                Saved("attn.core", "output O (also the output projection's input)", "2sbh" + ht, ACT * sb * qd, True),
            ]
        else:
            scores = b * heads * s * s
            rep = " (K repeated to every query head)" if block.kv_heads != block.heads else ""
            out += [
                Saved("attn.core", f"Kᵀ, for QKᵀ{rep}", "2sbh" + ht, ACT * sb * qd, True),
                Saved("attn.core", "Q, for QKᵀ", "2sbh" + ht, ACT * sb * qd, True),
                Saved("attn.core", "softmax output", "2as²b" + ht, ACT * scores, True),
            ]
            if block.dropout:
                out += [
                    Saved("attn.core.drop", "dropout mask on the probabilities", "as²b" + ht, MASK * scores, True),
                    Saved("attn.core", "V, for × V" + rep.replace("K", "V"), "2sbh" + ht, ACT * sb * qd, True),
                    Saved("attn.core", "dropped-out probabilities, for × V", "2as²b" + ht, ACT * scores, True),
                ]
            else:  # × V reads the softmax output itself
                out.append(Saved("attn.core", "V, for × V" + rep.replace("K", "V"), "2sbh" + ht, ACT * sb * qd, True))
            out.append(Saved("attn.o_proj", "input (the attention output, a copy)", "2sbh" + ht, ACT * sb * qd))
    if block.dropout:
        out.append(Saved("attn.drop", "dropout mask after attention", f"sbh{seq}", MASK * rows * h))
    norm("mlp_norm", "the residual after attention")
    if block.moe:
        out += moe_terms(
            block, s, b, tp=t, sequence_parallel=sequence_parallel, capacity_factor=capacity_factor, loads=loads
        )
    elif block.mlp == "swiglu":
        out += [
            Saved("mlp.gate", "input of gate and up projections (the norm's output)", f"2sbh{seq}", ACT * rows * h),
            Saved("mlp", "SiLU input (the gate projection)", "2sbf" + ht, ACT * sb * f),
            Saved("mlp", "SiLU output, for the product", "2sbf" + ht, ACT * sb * f),
            Saved("mlp", "up projection, for the product", "2sbf" + ht, ACT * sb * f),
            Saved("mlp.down", "input (the product)", "2sbf" + ht, ACT * sb * f),
        ]
    else:
        out += [
            Saved("mlp.up", "input (the norm's output)", f"2sbh{seq}", ACT * rows * h),
            Saved("mlp", "GeLU input", "2sbf" + ht, ACT * sb * f),
            Saved("mlp.down", "input (GeLU output)", "2sbf" + ht, ACT * sb * f),
        ]
    if block.dropout:
        out.append(Saved("mlp.drop", "dropout mask after the MLP", f"sbh{seq}", MASK * rows * h))
    return out


def _latent_attention(block: BlockShape, s: int, b: int, *, rows: int, seq: str, t: int, kind: str, recompute: str):
    """Multi-head latent attention (distlab.models.decoder.LatentAttention), eager: the latents and their norms
    (computed on every rank), then every head's K and V decompressed and kept like multi-head attention's."""
    if kind != "eager":
        raise ValueError("MLA is counted with eager attention only (its q/k and v widths differ)")
    heads, sb, ht = block.heads // t, s * b, "/t" if t > 1 else ""
    dqk, dv, rq, rkv, dr = (block.qk_nope_head_dim + block.qk_rope_head_dim, block.v_head_dim, block.q_lora_rank,
                            block.kv_lora_rank, block.qk_rope_head_dim)  # fmt: skip
    first = "attn.q_a" if rq else "attn.q_proj"
    out = [Saved(first, "input of the query and key/value down-projections", f"2sbh{seq}", ACT * rows * block.hidden)]
    if rq:
        out += [
            Saved("attn.q_norm", "input (the query latent)", "2sb·r_q", ACT * sb * rq),
            Saved("attn.q_norm", "1/rms per row (fp32)", "4sb", STAT * sb),
            Saved("attn.q_b", "input (the normalised query latent)", "2sb·r_q", ACT * sb * rq),
        ]
    out += [
        Saved("attn.kv_norm", "input: the key/value latent, a view that keeps the rotary key too", "2sb(r_kv + d_r)",
              ACT * sb * (rkv + dr)),
        Saved("attn.kv_norm", "1/rms per row (fp32)", "4sb", STAT * sb),
        Saved("attn.kv_b", "input (the normalised latent)", "2sb·r_kv", ACT * sb * rkv),
    ]  # fmt: skip
    if recompute == "selective":
        return out + [
            Saved("attn.core", "q: decompressed, rotary part appended (checkpoint input)", "2sba(d_n + d_r)" + ht,
                  ACT * sb * heads * dqk),
            Saved("attn.core", "k: decompressed, shared rotary key appended (checkpoint input)", "2sba(d_n + d_r)" + ht,
                  ACT * sb * heads * dqk),
            Saved("attn.core", "v, a view that keeps the whole decompressed k_nope and v (checkpoint input)",
                  "2sba(d_n + d_v)" + ht, ACT * sb * heads * (block.qk_nope_head_dim + dv)),
            Saved("attn.o_proj", "input (the attention output, a copy)", "2sba·d_v" + ht, ACT * sb * heads * dv),
        ]  # fmt: skip
    scores = b * heads * s * s
    out += [
        Saved("attn.core", "Kᵀ, for QKᵀ", "2sba(d_n + d_r)" + ht, ACT * sb * heads * dqk, True),
        Saved("attn.core", "Q, for QKᵀ", "2sba(d_n + d_r)" + ht, ACT * sb * heads * dqk, True),
        Saved("attn.core", "softmax output", "2as²b" + ht, ACT * scores, True),
    ]
    if block.dropout:
        out += [
            Saved("attn.core.drop", "dropout mask on the probabilities", "as²b" + ht, MASK * scores, True),
            Saved("attn.core", "V, for × V", "2sba·d_v" + ht, ACT * sb * heads * dv, True),
            Saved("attn.core", "dropped-out probabilities, for × V", "2as²b" + ht, ACT * scores, True),
        ]
    else:
        out.append(Saved("attn.core", "V, for × V", "2sba·d_v" + ht, ACT * sb * heads * dv, True))
    return out + [Saved("attn.o_proj", "input (the attention output, a copy)", "2sba·d_v" + ht, ACT * sb * heads * dv)]


def moe_terms(
    block: BlockShape,
    s: int,
    b: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    capacity_factor: float | None = None,
    loads: list[int] | None = None,
) -> list[Saved]:
    """The MoE MLP's buffers (distlab.models.moe.MoE). The router and the dispatch run on every token on every
    tensor-parallel rank; each expert's width is split t ways (expert tensor parallelism, as the dense MLP)."""
    t, h, f, k, e = tp, block.hidden, block.ffn // tp, block.top_k, block.experts
    tokens = s * b
    rows = tokens // t if sequence_parallel else tokens
    seq = "/t" if sequence_parallel and t > 1 else ""
    n = moe_slots(tokens, e, k, capacity_factor)
    if loads is not None and sum(loads) != n:
        raise ValueError(f"expert loads sum to {sum(loads)}, not the {n} slots the experts process")
    out = [
        Saved("mlp.router", "router input (the norm's output)", f"2sbh{seq}", ACT * rows * h),
        Saved("mlp", "top-k expert indices (int64)", "8sbk", INDEX * tokens * k),
        Saved("mlp", "gates: softmax over the k logits (fp32)", "4sbk", STAT * tokens * k),
        Saved("mlp", "token of each slot (int64; the gather and the scatter-add)", "8N", INDEX * n),
        Saved("mlp", "gate of each slot (int64 index into the gates)", "8N", INDEX * n),
        Saved("mlp.experts", "slot rows: every expert's input", "2Nh", ACT * n * h),
    ]
    per_expert = loads if loads is not None else [n]
    for i, m in enumerate(per_expert):
        if m == 0:
            continue  # an expert that got nothing keeps nothing
        who = f"expert {i}: " if loads is not None else "experts: "
        out += [
            Saved("mlp.experts", who + "SiLU input", "2Nf" + ("/t" if t > 1 else ""), ACT * m * f),
            Saved("mlp.experts", who + "SiLU output", "2Nf" + ("/t" if t > 1 else ""), ACT * m * f),
            Saved("mlp.experts", who + "up projection", "2Nf" + ("/t" if t > 1 else ""), ACT * m * f),
            Saved("mlp.experts", who + "down projection's input", "2Nf" + ("/t" if t > 1 else ""), ACT * m * f),
        ]
    out += [
        Saved("mlp", "slot gates (for the experts' outputs' gradient)", "2N", ACT * n),
        Saved("mlp", "experts' outputs (for the gates' gradient)", "2Nh", ACT * n * h),
    ]
    return out


def layer_bytes(block: BlockShape, s: int, b: int, **kw) -> int:
    """Bytes one layer keeps for backward on one rank: the sum of saved_tensors."""
    return sum(x.bytes for x in saved_tensors(block, s, b, **kw))


def gpt_block(hidden: int, heads: int, *, ffn: int | None = None, dropout: bool = True) -> BlockShape:
    """Korthikanti et al.'s GPT layer: LayerNorm, multi-head attention, a 4h GeLU MLP, learned positions."""
    return BlockShape(
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn=ffn or 4 * hidden,
        mlp="gelu",
        norm="layernorm",
        dropout=dropout,
        rope=False,
    )


def output_terms(
    hidden: int, vocab: int, s: int, b: int, *, norm: str = "rmsnorm", tp: int = 1, sequence_parallel: bool = False
) -> list[Saved]:
    """What the final norm, the output head and the loss keep: the logits in fp32 dominate at large
    vocabularies (s·b·V·4 bytes: cross-entropy keeps its log-softmax; the 16-bit logits themselves are not
    kept). With tensor parallelism the vocabulary is split t ways (Megatron's vocabulary-parallel head, which pads
    the vocabulary to a multiple of t: ⌈V/t⌉ columns per rank)."""
    for name, v in (("seq", s), ("batch", b), ("tp", tp), ("vocab", vocab), ("hidden", hidden)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive whole number, got {v!r}")
    rows = s * b // tp if sequence_parallel else s * b
    seq = "/t" if sequence_parallel and tp > 1 else ""
    vt = "/t" if tp > 1 else ""
    stats = ("1/rms",) if norm == "rmsnorm" else ("mean", "1/std")
    return [
        Saved("norm", "final norm input", f"2sbh{seq}", ACT * rows * hidden),
        *(Saved("norm", f"final norm {st} per row (fp32)", f"4sb{seq}", STAT * rows) for st in stats),
        Saved("head", "head input (the final norm's output)", f"2sbh{seq}", ACT * rows * hidden),
        Saved("loss", "log-softmax of the fp32 logits", f"4sbV{vt}", STAT * s * b * -(-vocab // tp)),
        Saved("loss", "targets (int64)", "8sb", INDEX * s * b),
        Saved("loss", "total weight (a 0-d fp32 tensor)", "4", STAT),
    ]


def formula(terms: list[Saved]) -> str:
    """The sum of the terms' notations with like terms collected, in the order they first appear:
    '12sbh + 4sbh·g/a + 8sbf + 4abs + 8sb'."""
    coef: dict[str, int] = {}
    for x in terms:
        digits = len(x.notation) - len(x.notation.lstrip("0123456789"))
        c, rest = (int(x.notation[:digits]) if digits else 1), x.notation[digits:]
        coef[rest] = coef.get(rest, 0) + c
    return " + ".join(f"{c if c != 1 or not m else ''}{m}" for m, c in coef.items())
