"""Activation bytes of a 7B model at sequence 4096: Korthikanti et al. 2022's Table 2 rows, recompute x tensor
and sequence parallelism x micro-batch (experiment activations-7b), computed from distlab.memory.activations;
then Llama 2 7B's own layer (SwiGLU, no dropout, FlashAttention or not), architecture-exact.
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.facts import fact
from distlab.core.results import Quantity, Result
from distlab.memory import activation_checks
from distlab.memory.activations import (
    FORMULAS,
    SITE_EXTENSIONS,
    activation_bytes_per_layer,
    block_terms,
    layer_forward_flops,
    model_activation_bytes,
    published_bytes_per_layer,
)
from distlab.models.shapes import presets

# ---------------------------------------------------------------- a 7B model: the paper's table
VARIANTS = [  # (label, tp, sequence_parallel, recompute): the rows of the paper's Table 2
    ("no parallelism", 1, False, "none"),
    ("no parallelism, selective recompute", 1, False, "selective"),
    ("no parallelism, full recompute", 1, False, "full"),
    ("tensor parallel", 8, False, "none"),
    ("tensor + sequence parallel", 8, True, "none"),
    ("tensor parallel, selective recompute", 8, False, "selective"),
    ("tensor + sequence parallel, selective recompute", 8, True, "selective"),
    ("full recompute (tensor parallel)", 8, False, "full"),
    ("full recompute (tensor + sequence parallel)", 8, True, "full"),
]


@experiment(
    "activations-7b",
    "activation bytes of a 7B model at sequence 4096: recompute x tensor/sequence "
    "parallelism x micro-batch (Korthikanti Table 2)",
    kind="computed",
)
def activations_7b(device: str) -> Result:
    r = Result("activations-7b")
    m, seq, batches = presets()["7B"], 4096, (1, 2, 4, 8)
    hbm = fact("gpus.H100-SXM.hbm_gb").value * 1e9
    r.add("layers", m.layers, "", f"{m.name} layers")
    r.add("hidden", m.hidden, "", "hidden size")
    r.add("heads", m.heads, "", "attention heads")
    r.add("seq", seq, "tokens", "sequence length")
    r.add("attention_ratio", 5 * m.heads * seq / m.hidden, "", "5as/h: the attention core's share, in sbh units")
    rows, totals = [], {}
    for label, t, sp, rc in VARIANTS:
        cells = []
        for b in batches:
            total = m.layers * activation_bytes_per_layer(
                seq, b, m.hidden, m.heads, tp=t, sequence_parallel=sp, recompute=rc
            )
            totals[(label, b)] = total
            cells.append(Quantity(total, "B"))
        expression = FORMULAS[(sp, rc)]
        if (sp, rc) in SITE_EXTENSIONS:
            expression += " (this site's extension: Table 2 gives 2sbh)"
        rows.append([label, t, expression] + cells)
    r.table(
        "variants",
        ["variant", "t", "per layer (Table 2)", *(f"b = {b}" for b in batches)],
        rows,
        caption=f"{m.name}: activation bytes per GPU for all {m.layers} layers, s = {seq}, 16-bit activations "
        "with dropout (the paper's convention); computed by distlab.memory.activations",
    )
    none1 = totals[("no parallelism", 1)]
    for key, label in (
        ("none", "no parallelism"),
        ("selective", "no parallelism, selective recompute"),
        ("full", "no parallelism, full recompute"),
        ("tp", "tensor parallel"),
        ("tp_sp", "tensor + sequence parallel"),
        ("tp_sp_selective", "tensor + sequence parallel, selective recompute"),
    ):
        for b in (1, 8):
            r.add(f"{key}_b{b}", totals[(label, b)], "B", f"{label}, micro-batch {b}")
    r.add(
        "selective_saving",
        1 - totals[("no parallelism, selective recompute", 1)] / none1,
        "fraction",
        "share of activation memory that selective recompute removes",
    )
    r.add("none_b1_over_hbm", none1 / hbm, "", "no recompute, b = 1, over one 80 GB GPU")
    from distlab.memory.model_states import DEFAULT_PRECISION, bytes_per_param, model_state_bytes

    states = sum(model_state_bytes(m.params()).values()) / 8  # mixed-precision AdamW states, ZeRO-3 over 8 GPUs
    r.add("states_zero3_8", states, "B", "7B model states per GPU, sharded over 8 GPUs")
    r.add("bytes_per_param", bytes_per_param(DEFAULT_PRECISION), "B", "the default: bf16 weights and gradients")
    bf16, fp32 = 2, 4  # bytes of one element, by hand
    by_hand = {
        "mixed": bf16 + bf16 + fp32 * 3,  # weights, gradients; master weights, Adam m and v
        "mixed-fp32-grads": bf16 + fp32 + fp32 * 3,  # Megatron's main_grad replaces the bf16 gradient
        "mixed-fp32-accum": bf16 + bf16 + fp32 + fp32 * 3,  # an fp32 accumulation buffer beside it
    }
    for precision, want in by_hand.items():
        r.claim(f"{precision}: bytes per parameter = its parts by hand", bytes_per_param(precision), want, unit="B")
        r.claim(
            f"{precision}: 7B states per GPU over 8 GPUs = Ψ × bytes / 8",
            sum(model_state_bytes(m.params(), precision).values()) / 8,
            m.params() * want / 8,
            rel_tol=1e-12,
            unit="B",
        )
    for precision in ("mixed-fp32-grads", "mixed-fp32-accum"):
        key = precision.removeprefix("mixed-").replace("-", "_")
        r.add(f"bytes_per_param_{key}", bytes_per_param(precision), "B", f"{precision}: per parameter")
        r.add(
            f"states_zero3_8_{key}",
            sum(model_state_bytes(m.params(), precision).values()) / 8,
            "B",
            f"7B model states per GPU over 8 GPUs, {precision}",
        )
    for rc in ("none", "selective", "full"):
        fits = [
            b
            for b in range(1, 65)
            if states + m.layers * activation_bytes_per_layer(seq, b, m.hidden, m.heads, recompute=rc) <= hbm
        ]
        r.add(
            f"fit_b_{rc}",
            max(fits, default=0),
            "",
            f"largest micro-batch that fits 80 GB with sharded states, {rc} recompute (0: none)",
        )
    _exact(r, m, seq, batches, hbm, states)
    flops = layer_forward_flops(seq, 1, m.hidden)
    r.add(
        "core_flop_share",
        flops["core"] / flops["layer"],
        "fraction",
        "attention core's share of a layer's forward matmul FLOPs, 4s/(24h + 4s)",
    )
    g3 = layer_forward_flops(2048, 1, 12288)
    r.add("gpt3_core_flop_share", g3["core"] / g3["layer"], "fraction", "the same for GPT-3 175B at s = 2048")
    for rc in ("none", "selective"):
        r.add(
            f"layer_over_input_{rc}",
            activation_bytes_per_layer(seq, 1, m.hidden, m.heads, recompute=rc)
            / activation_bytes_per_layer(seq, 1, m.hidden, m.heads, recompute="full"),
            "",
            f"one layer's saves / its input, {rc} recompute",
        )
    r.add("logits_b1", 4 * seq * m.vocab, "B", "fp32 logits of one sequence for the loss (s · V · 4 B)")
    r.add("vocab", m.vocab, "tokens", "vocabulary")
    for rc in ("none", "selective"):
        r.add(
            f"double_seq_{rc}",
            activation_bytes_per_layer(2 * seq, 1, m.hidden, m.heads, recompute=rc)
            / activation_bytes_per_layer(seq, 1, m.hidden, m.heads, recompute=rc),
            "",
            f"activation growth when s doubles, {rc} recompute",
        )
    # The paper's Table 2 rows agree with one another where they must: t = 1 with sequence parallelism is
    # no parallelism; the variants sum the same per-term pieces as block_terms' paper column.
    s, b, h, a = seq, 1, m.hidden, m.heads
    r.claim(
        "Table 2 at t = 1: sequence parallel equals no parallelism",
        activation_bytes_per_layer(s, b, h, a, tp=1, sequence_parallel=True),
        published_bytes_per_layer(s, b, h, a),
        unit="B",
    )
    r.claim(
        "the paper's terms of Section 4.1 sum to sbh(34 + 5as/h)",
        sum(t.paper_bytes for t in block_terms(s, b, h, a)),
        published_bytes_per_layer(s, b, h, a),
        unit="B",
    )
    r.claim(
        "selective recompute drops exactly the 5as²b terms",
        none1 - totals[("no parallelism, selective recompute", 1)],
        m.layers * 5 * a * s * s * b,
        unit="B",
        formula="L · 5as²b",
    )
    # Table 2's tensor-parallel rows as the paper prints them, typed out here as the reference: a t missing from
    # (or added to) any term of activations.py's formula breaks one of them.
    printed = {
        "tensor parallel": lambda t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
        "tensor + sequence parallel": lambda t: s * b * h / t * (34 + 5 * a * s / h),
        "tensor parallel, selective recompute": lambda t: s * b * h * (10 + 24 / t),
        "tensor + sequence parallel, selective recompute": lambda t: s * b * h / t * 34,
        "full recompute (tensor parallel)": lambda t: 2 * s * b * h,
    }
    for label, t, sp, rc in VARIANTS:
        if label in printed:
            r.claim(
                f"Table 2, {label} (t = {t}): activations.py = the paper's printed expression",
                activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=sp, recompute=rc),
                printed[label](t),
                unit="B",
                formula=FORMULAS[(sp, rc)],
            )
    gpt3 = dict(s=2048, h=12288, a=96)  # GPT-3 175B, the paper's running example
    r.add("gpt3_attention_ratio", 5 * gpt3["a"] * gpt3["s"] / gpt3["h"], "", "5as/h for GPT-3 175B")
    r.add(
        "gpt3_selective_saving",
        1 - 34 / (34 + 5 * gpt3["a"] * gpt3["s"] / gpt3["h"]),
        "fraction",
        "share of GPT-3's activations that selective recompute removes",
    )
    activation_checks.activations_7b(r)  # every number shown, against references worked by hand
    return r


def _exact(r: Result, m, seq: int, batches: tuple, hbm: float, states: float) -> None:
    """Llama 2 7B's own layer (distlab.memory.layer_activations: SwiGLU of width 11008, multi-head attention,
    RMSNorm, no dropout), with the s x s matrices (eager) or with FlashAttention, each cell checked against the
    layer written out by hand: eager 16sbh + 2as²b + 8sbf + 8sb, flash 16sbh + 8sbf + 4abs + 8sb (a = g),
    selective 16sbh + 8sbf + 8sb, full 2sbh, and with t-way sequence parallelism every term over t."""
    h, a, f, L = m.hidden, m.heads, m.ffn, m.layers
    hand = {
        "eager": lambda s, b: 16 * s * b * h + 2 * a * s * s * b + 8 * s * b * f + 8 * s * b,
        "flash": lambda s, b: 16 * s * b * h + 8 * s * b * f + 4 * a * b * s + 8 * s * b,
        "selective": lambda s, b: 16 * s * b * h + 8 * s * b * f + 8 * s * b,
        "full": lambda s, b: 2 * s * b * h,
    }
    variants = [  # (label, attention, recompute, t, hand formula key)
        ("eager attention, no recompute", "eager", "none", 1, "eager"),
        ("FlashAttention, no recompute", "flash", "none", 1, "flash"),
        ("FlashAttention, selective recompute", "flash", "selective", 1, "selective"),
        ("FlashAttention, t = 8 + sequence parallel", "flash", "none", 8, "flash"),
        ("full recompute", "flash", "full", 1, "full"),
    ]
    rows = []
    for label, att, rc, t, key in variants:
        cells = []
        for b in batches:
            got = model_activation_bytes(m, seq, b, attention=att, recompute=rc, tp=t, sequence_parallel=t > 1)
            r.claim(
                f"{m.name} as trained, {label}, b = {b}: = the layer by hand",
                got,
                L * hand[key](seq, b) / t,
                unit="B",
                formula=f"L × ({key} layer) / t",
            )
            cells.append(Quantity(got, "B"))
        rows.append([label, t] + cells)
    r.table(
        "exact",
        ["variant", "t", *(f"b = {b}" for b in batches)],
        rows,
        caption=f"{m.name} as it is trained (SwiGLU f = {f}, no dropout, RMSNorm): activation bytes per GPU for all "
        f"{L} layers, s = {seq}; architecture-exact, computed by distlab.memory.layer_activations",
    )
    exact = {
        k: model_activation_bytes(m, seq, 1, attention=att, recompute=rc)
        for k, att, rc in (("eager", "eager", "none"), ("flash", "flash", "none"), ("selective", "flash", "selective"))
    }
    for k, v in exact.items():
        r.add(f"exact_{k}_b1", v, "B", f"{m.name}, its own layer, {k}, b = 1")
    paper_selective = m.layers * activation_bytes_per_layer(seq, 1, m.hidden, m.heads, recompute="selective")
    r.add(
        "exact_flash_vs_paper_selective",
        exact["flash"] / paper_selective - 1,
        "fraction",
        "FlashAttention, its own layer, against the paper's selective row (what FlashAttention was priced as)",
    )
    fits = [b for b in range(1, 65) if states + model_activation_bytes(m, seq, b) <= hbm]
    r.add("fit_b_flash", max(fits, default=0), "", "largest micro-batch that fits 80 GB, FlashAttention, no recompute")
    r.claim(
        "with FlashAttention and no recompute, the largest micro-batch fits",
        states + model_activation_bytes(m, seq, max(fits)),
        hbm,
        relation="<=",
        unit="B",
    )
    r.claim(
        "with FlashAttention and no recompute, one more sequence does not fit",
        states + model_activation_bytes(m, seq, max(fits) + 1),
        hbm,
        relation=">=",
        unit="B",
    )
