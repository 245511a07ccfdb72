"""Sequence parallelism (Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198, Section 4.2.2) by the
numbers: what it saves in activation memory and what it costs in communication (nothing extra).

Tensor parallelism splits the attention and MLP activations by t but leaves the LayerNorm and dropout
regions replicated: 10sbh bytes per layer that every rank of the group holds in full. Sequence
parallelism splits those along the sequence, so every activation is divided by t. The all-reduce
that ended each sub-layer becomes a reduce-scatter (into sequence shards) and the identity that
began it an all-gather: in a ring, (t-1)/t N + (t-1)/t N = 2(t-1)/t N bytes, the all-reduce's own.
The operators themselves run on real processes in distlab.model_parallel.tensor_parallel (experiment tensor-parallel).
"""

from __future__ import annotations

from distlab.core.experiments import experiment
from distlab.core.results import Quantity, Result
from distlab.memory.activations import activation_bytes_per_layer
from distlab.model_parallel.tensor_parallel import ring_wire_bytes
from distlab.models.shapes import presets

MODELS = ("7B", "13B", "70B", "175B")


def replicated_bytes_saved(seq: int, batch: int, hidden: int, tp: int) -> float:
    """What sequence parallelism saves per layer and GPU: the 10sbh replicated bytes, less the 10sbh/t
    each rank keeps of them (Korthikanti et al., Table 2, rows with and without it)."""
    return 10 * seq * batch * hidden * (tp - 1) / tp


def korthikanti_table2(s: int, b: int, h: int, a: int, t: int, sp: bool, recompute: str) -> float:
    """The paper's Table 2, transcribed here as the independent reference for the shown numbers: per layer,
    no recompute sbh(10 + 24/t + 5as/(ht)), with SP sbh/t (34 + 5as/h); selective sbh(10 + 24/t), with SP 34sbh/t."""
    core = 5 * a * s / h
    if recompute == "selective":
        return 34 * s * b * h / t if sp else s * b * h * (10 + 24 / t)
    return s * b * h / t * (34 + core) if sp else s * b * h * (10 + 24 / t + core / t)


def tp_wire_bytes_per_layer(seq: int, batch: int, hidden: int, tp: int, bytes_per_element: int = 2) -> float:
    """Bytes each rank sends per layer, forward and backward: four all-reduces of sbh elements (two
    forward, two backward), or with sequence parallelism four reduce-scatters and four all-gathers."""
    n = seq * batch * hidden * bytes_per_element
    return 4 * ring_wire_bytes("all-reduce", n, tp)


def _llama_70b(r: Result, m) -> None:
    """Llama 2 70B's own activations at t = 8 with selective recompute (chapter 3's architecture-exact count:
    SwiGLU of width f, grouped key/value heads, RMSNorm, no dropout), not Table 2's GPT layer, which is low for
    Llama with sequence parallelism. Checked against chapter 3's closed form written out here."""
    from distlab.memory.activations import model_activation_bytes_per_layer

    s, b, h, f, t = m.seq, 1, m.hidden, m.ffn, 8
    for sp in (False, True):
        key = "sp" if sp else "tp"
        layer = model_activation_bytes_per_layer(
            m, s, b, tp=t, sequence_parallel=sp, recompute="selective", attention="flash"
        )
        r.add(
            f"70b_{key}_selective_layer", layer, "B", f"Llama 2 70B, t=8, selective, per layer{' + SP' if sp else ''}"
        )
        r.add(f"70b_{key}_selective_model", m.layers * layer, "B", f"... all {m.layers} layers")
    exact = (12 * s * b * h + 4 * s * b * h * m.kv_heads / m.heads + 8 * s * b * f + 8 * s * b) / t
    r.claim(
        "Llama 2 70B, t=8, SP, selective: per layer = (12sbh + 4sbh g/a + 8sbf + 8sb) / t (chapter 3)",
        r.quantities["70b_sp_selective_layer"].value,
        exact,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "Llama 2 70B, t=8, SP, selective: all layers = L x chapter 3's closed form",
        r.quantities["70b_sp_selective_model"].value,
        m.layers * exact,
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "Llama 2 70B, t=8, no SP, selective: all layers = L x (closed form + (8sbh + 8sb)(t-1)/t)",
        r.quantities["70b_tp_selective_model"].value,
        m.layers * (exact + (8 * s * b * h + 8 * s * b) * (t - 1) / t),
        rel_tol=1e-12,
        unit="B",
    )
    r.claim(
        "... without SP each rank keeps Llama's norm inputs, outputs and fp32 statistics whole: + (8sbh + 8sb)(t-1)/t",
        r.quantities["70b_tp_selective_layer"].value - r.quantities["70b_sp_selective_layer"].value,
        (8 * s * b * h + 8 * s * b) * (t - 1) / t,
        rel_tol=1e-12,
        unit="B",
    )


@experiment(
    "sequence-parallel",
    "activation memory per layer with and without sequence parallelism "
    "(Korthikanti et al. 2022), and its communication, for 7B to 175B",
    kind="computed",
)
def sequence_parallel(device: str) -> Result:
    r = Result("sequence-parallel")
    rows = []
    for name in MODELS:
        m = presets()[name]
        s, b, h, a = m.seq, 1, m.hidden, m.heads
        for t in (4, 8):
            for recompute in ("none", "selective"):
                without = activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=False, recompute=recompute)
                with_sp = activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=True, recompute=recompute)
                for sp, got in ((False, without), (True, with_sp)):
                    r.claim(
                        f"{name}, t={t}, recompute {recompute}{', SP' if sp else ''}: per layer = Korthikanti Table 2",
                        got,
                        korthikanti_table2(s, b, h, a, t, sp, recompute),
                        rel_tol=1e-12,
                        unit="B",
                    )
                r.claim(
                    f"{name}, t={t}, recompute {recompute}: saving = 10sbh(t-1)/t",
                    without - with_sp,
                    replicated_bytes_saved(s, b, h, t),
                    rel_tol=1e-12,
                    unit="B",
                )
                rows.append(
                    [
                        name,
                        t,
                        recompute,
                        Quantity(without, "B"),
                        Quantity(with_sp, "B"),
                        Quantity(m.layers * (without - with_sp), "B"),
                    ]
                )
                r.claim(
                    f"{name}, t={t}, recompute {recompute}: saved over all layers = L x Table 2's difference",
                    rows[-1][-1].value,
                    m.layers
                    * (
                        korthikanti_table2(s, b, h, a, t, False, recompute)
                        - korthikanti_table2(s, b, h, a, t, True, recompute)
                    ),
                    rel_tol=1e-12,
                    unit="B",
                )
        act = s * b * h * 2  # one (s, b, h) bf16 activation
        rs_ag = 4 * (ring_wire_bytes("reduce-scatter", act, 8) + ring_wire_bytes("all-gather", act, 8))
        r.claim(
            f"{name}, t=8: reduce-scatters + all-gathers send what the all-reduces did",
            rs_ag,
            tp_wire_bytes_per_layer(s, b, h, 8),
            rel_tol=1e-12,
            unit="B",
        )
    r.table(
        "memory",
        ["model", "t", "recompute", "per layer, TP only", "per layer, TP + SP", "saved over all layers"],
        rows,
        caption="Activation bytes per GPU, micro-batch 1 at each model's training sequence length, 16-bit "
        "activations (Korthikanti et al. 2022, Table 2).",
    )
    m = presets()["70B"]
    s, h, a = m.seq, m.hidden, m.heads
    _llama_70b(r, m)
    for sp in (False, True):
        key = "sp" if sp else "tp"
        r.add(
            f"70b_{key}_table2_model",
            m.layers * activation_bytes_per_layer(s, 1, h, a, tp=8, sequence_parallel=sp, recompute="selective"),
            "B",
            f"70B's shape in Table 2's GPT formula, all {m.layers} layers{' with SP' if sp else ''}",
        )
        r.claim(
            f"70B, t=8, selective{', SP' if sp else ''}: all layers in Table 2's GPT formula = L x Table 2 transcribed",
            r.quantities[f"70b_{key}_table2_model"].value,
            m.layers * korthikanti_table2(s, 1, h, a, 8, sp, "selective"),
            rel_tol=1e-12,
            unit="B",
        )
    wire = r.add(
        "70b_wire_bytes_layer",
        tp_wire_bytes_per_layer(s, 1, h, 8),
        "B",
        "70B, t=8: bytes each rank sends per layer, forward + backward, bf16",
    )
    from distlab.data_parallel.ring_allreduce import traffic

    sent = max(traffic(s * h * 2, 8, "ring").sent)  # one (s, h) bf16 all-reduce, simulated message by message
    r.claim(
        "70B, t=8: bytes per layer = 4 all-reduces of the ring simulator's bytes per rank",
        wire,
        4 * sent,
        rel_tol=1e-12,
        unit="B",
        formula="two all-reduces forward, two backward (Megatron's f and g)",
    )
    r.claim(
        "with SP, Table 2's GPT layer is low for Llama 2 70B (its SwiGLU MLP keeps 8sbf, GPT's 4sbf at f = 4h)",
        r.quantities["70b_sp_table2_model"].value,
        r.quantities["70b_sp_selective_model"].value,
        relation="<=",
        unit="B",
    )
    r.add("70b_layers", m.layers, "", "layers of Llama 2 70B")
    r.add("70b_seq", s, "tokens", "training sequence of Llama 2 70B")
    return r
