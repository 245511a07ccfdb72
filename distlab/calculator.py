"""The live memory calculator: per-GPU training memory by category, and whether it fits.

One GPU of a (data x tensor x pipeline)-parallel job with mixed-precision AdamW holds

    weights      2Ψ' / d   when ZeRO stage >= 3, else 2Ψ'      Ψ' = ⌈Ψ / (t p)⌉, the model-parallel shard
    gradients    2Ψ' / d   when ZeRO stage >= 2
    optimizer   12Ψ' / d   when ZeRO stage >= 1   (fp32 master weights, Adam m and v)
    activations  L x A_layer(s, b, h, a, t)      (Korthikanti et al. 2022, Table 2)

with d = GPUs / (t p) data-parallel replicas. The three model states are chapter 6's
`distlab.sharding.zero.model_state_bytes_per_gpu(Ψ', d, stage)`: exact integers, a sharded state padded to
d⌈Ψ'/d⌉ elements. The model-parallel split is taken as even (Ψ' each), an approximation: real pipelines
put the embedding on the first stage and the head on the last.

Activations: a pipeline stage holds L/p layers, and under the 1F1B schedule the first stage keeps p
micro-batches in flight, so it holds L layers' worth (Korthikanti et al., Section 4.2.3), whatever p is.

The page's JavaScript (docs/assets/calculator.js) implements these formulas once more, in the same
order of floating-point operations. The build writes test vectors computed here (`vectors()`), and
the browser test types every one into the live page and compares what it shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distlab.core.experiments import experiment
from distlab.core.formatting import format_quantity
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import gpu, gpu_names
from distlab.memory.activations import RECOMPUTE, activation_bytes_per_layer, published_bytes_per_layer
from distlab.models.shapes import ModelShape, presets
from distlab.sharding.zero import STAGES as ZERO_STAGES
from distlab.sharding.zero import bytes_per_param_by_state, model_state_bytes_per_gpu

CATEGORIES = ("weights", "gradients", "optimizer", "activations")


def gpu_memory_bytes() -> dict[str, float]:
    """GPU name -> memory capacity in bytes (datasheet GB = 1e9 bytes), from distlab.hardware.gpus."""
    return {name: gpu(name).hbm_bytes for name in gpu_names()}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One training configuration, as the calculator page's form holds it."""

    model: ModelShape
    """The model's shape (a preset or a custom one); its parameter count follows from it."""
    seq: int
    """Sequence length s (tokens)."""
    micro_batch: int
    """Micro-batch size b (sequences per GPU per forward)."""
    gpus: int
    """Total GPUs N = d t p."""
    gpu: str
    """GPU type, a name from distlab/data/gpus.toml."""
    zero: int = 0
    """ZeRO stage: 0 (plain data parallel), 1 (optimizer), 2 (+ gradients), 3 (+ weights)."""
    tp: int = 1
    """Tensor-parallel size t."""
    pp: int = 1
    """Pipeline-parallel size p."""
    recompute: str = "none"
    """Activation recomputation: none, selective (attention core) or full (keep layer inputs only)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: the non-tensor-parallel activations split t ways too."""

    def __post_init__(self) -> None:
        for name in ("seq", "micro_batch", "gpus", "tp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
        if self.zero not in ZERO_STAGES:
            raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {self.zero!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {self.recompute!r}")
        known = gpu_memory_bytes()
        if self.gpu not in known:
            raise ValueError(f"unknown GPU {self.gpu!r}; known: {', '.join(known)}")
        if self.gpus % (self.tp * self.pp):
            raise ValueError(f"GPUs ({self.gpus}) must be a multiple of TP x PP ({self.tp * self.pp})")
        if self.model.heads % self.tp:
            raise ValueError(f"attention heads ({self.model.heads}) must be divisible by TP ({self.tp})")
        if self.model.layers % self.pp:
            raise ValueError(f"layers ({self.model.layers}) must split evenly into PP ({self.pp}) stages")

    @property
    def dp(self) -> int:
        """Data-parallel replicas d = N / (t p)."""
        return self.gpus // (self.tp * self.pp)


def shape(model: str, seq: int, **custom) -> ModelShape:
    """A preset by name, or model="custom" with layers, hidden, heads, kv_heads, ffn, vocab, mlp,
    tie_embeddings. Learned positions (GPT-style models) are sized to the training sequence."""
    if model == "custom":
        return ModelShape(name="custom", seq=seq, **custom)
    known = presets()
    if model not in known:
        raise ValueError(f"unknown model preset {model!r}; known: {', '.join(known)}, custom")
    return dataclasses.replace(known[model], seq=seq)


def memory(plan: Plan) -> dict:
    """Per-GPU bytes by category, their total, the GPU's capacity, and whether it fits.

    The floating-point operations here and in calculator.js are the same, in the same order."""
    m, t, p, d = plan.model, plan.tp, plan.pp, plan.dp
    params = m.params()
    shard = ceil_div(params, t * p)  # Ψ' parameters on one model-parallel rank (an even split, rounded up)
    states = model_state_bytes_per_gpu(shard, d, plan.zero)
    weights, gradients, optimizer = states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]
    per_layer = activation_bytes_per_layer(
        plan.seq,
        plan.micro_batch,
        m.hidden,
        m.heads,
        tp=t,
        sequence_parallel=plan.sequence_parallel,
        recompute=plan.recompute,
    )
    activations = m.layers * per_layer  # L/p layers x p micro-batches in flight on the first stage
    total = weights + gradients + optimizer + activations
    capacity = gpu_memory_bytes()[plan.gpu]
    return {
        "params": params,
        "dp": d,
        "weights": weights,
        "gradients": gradients,
        "optimizer": optimizer,
        "activations": activations,
        "total": total,
        "capacity": capacity,
        "fits": total <= capacity,
    }


# ---------------------------------------------------------------- what the page and its tests read
SHAPE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "tie_embeddings")
DEFAULTS = {
    "model": "7B",
    "seq": 4096,
    "micro_batch": 1,
    "gpus": 8,
    "gpu": "H100-SXM",
    "zero": 3,
    "tp": 1,
    "pp": 1,
    "recompute": "selective",
    "sequence_parallel": False,
}


def plan_from(inputs: dict) -> Plan:
    """A Plan from the form's fields (the keys of a test vector's "input")."""
    custom = {k: inputs[k] for k in SHAPE_FIELDS} if inputs["model"] == "custom" else {}
    model = shape(inputs["model"], inputs["seq"], **custom)
    return Plan(
        model=model,
        seq=inputs["seq"],
        micro_batch=inputs["micro_batch"],
        gpus=inputs["gpus"],
        gpu=inputs["gpu"],
        zero=inputs["zero"],
        tp=inputs["tp"],
        pp=inputs["pp"],
        recompute=inputs["recompute"],
        sequence_parallel=inputs["sequence_parallel"],
    )


def evaluate(inputs: dict) -> dict:
    """What the page must show for these inputs: the numbers and their text as the site formats them
    (`display`), or {"error": message}."""
    try:
        out = memory(plan_from(inputs))
    except ValueError as exc:
        return {"error": str(exc)}
    out["display"] = {k: format_quantity(out[k], "B") for k in (*CATEGORIES, "total", "capacity")}
    out["display"]["params"] = format_quantity(out["params"], "params")
    return out


def site_data() -> dict:
    """Everything calculator.js needs besides its formulas: presets, GPUs, bytes per parameter, defaults."""
    return {
        "presets": {
            name: {"name": m.name, "seq": m.seq, **{k: getattr(m, k) for k in SHAPE_FIELDS}, "kv_heads": m.kv}
            for name, m in presets().items()
        },
        "gpus": gpu_memory_bytes(),
        "bytes_per_param": bytes_per_param_by_state("mixed"),
        "recompute": list(RECOMPUTE),
        "zero": list(ZERO_STAGES),
        "defaults": DEFAULTS,
    }


_AWKWARD = {
    "layers": 30,
    "hidden": 3000,
    "heads": 24,
    "kv_heads": 8,
    "ffn": 7777,
    "vocab": 50257,
    "mlp": "swiglu",
    "tie_embeddings": False,
}
_GPT_LIKE = {
    "layers": 12,
    "hidden": 768,
    "heads": 12,
    "kv_heads": 12,
    "ffn": 3072,
    "vocab": 50257,
    "mlp": "gelu",
    "tie_embeddings": True,
}


def vectors() -> list[dict]:
    """Test vectors for the live page: every preset and GPU, every ZeRO stage and recompute mode,
    awkward sizes (sequence 97 and 1000, 3 and 12 GPUs, a custom model with hidden 3000 and ffn 7777),
    both verdicts, and inputs the page must refuse. Deterministic: the same list on every build."""
    all_gpus = list(gpu_memory_bytes())
    base = dict(DEFAULTS)
    cases: list[dict] = []
    for name, m in presets().items():  # every preset on every GPU, at its own sequence length
        for gpu_name in all_gpus:
            cases.append(base | {"model": name, "seq": m.seq, "gpu": gpu_name})
    for zero in ZERO_STAGES:
        for recompute in RECOMPUTE:
            cases.append(base | {"zero": zero, "recompute": recompute})
    cases += [
        base | {"model": "1B", "gpus": 1, "zero": 0, "recompute": "none"},
        base | {"model": "1B", "gpus": 3, "zero": 2, "seq": 97, "micro_batch": 3},
        base | {"model": "1B", "gpus": 7, "zero": 3, "seq": 257, "micro_batch": 2, "recompute": "none"},
        base | {"model": "custom", **_AWKWARD, "seq": 1000, "gpus": 9, "pp": 3, "zero": 3, "micro_batch": 1},
        base | {"model": "13B", "gpus": 12, "zero": 1, "seq": 1000, "micro_batch": 5, "recompute": "none"},
        base | {"model": "70B", "gpus": 64, "tp": 8, "pp": 4, "zero": 1, "recompute": "selective"},
        base | {"model": "70B", "gpus": 64, "tp": 8, "pp": 4, "zero": 1, "sequence_parallel": True},
        base | {"model": "70B", "gpus": 512, "tp": 8, "pp": 8, "zero": 3, "recompute": "full", "micro_batch": 2},
        base | {"model": "175B", "seq": 2048, "gpus": 1024, "tp": 8, "pp": 16, "zero": 1, "recompute": "full"},
        base
        | {"model": "175B", "seq": 2048, "gpus": 96, "tp": 4, "pp": 8, "sequence_parallel": True, "recompute": "none"},
        base | {"model": "custom", **_AWKWARD, "seq": 257, "gpus": 6, "tp": 2, "zero": 2, "micro_batch": 7},
        base
        | {
            "model": "custom",
            **_AWKWARD,
            "seq": 8192,
            "gpus": 30,
            "pp": 5,
            "tp": 2,
            "zero": 0,
            "recompute": "none",
            "sequence_parallel": True,
        },
        base
        | {"model": "custom", **_GPT_LIKE, "seq": 1024, "gpus": 2, "zero": 0, "micro_batch": 12, "recompute": "none"},
        # inputs the page must refuse (the same ones distlab refuses)
        base | {"gpus": 6, "tp": 4},  # 6 GPUs are not a multiple of TP x PP
        base | {"model": "7B", "pp": 3, "gpus": 3},  # 32 layers do not split into 3 stages
        base | {"model": "13B", "tp": 3, "gpus": 3},  # 40 heads do not divide by TP 3
        base | {"model": "custom", **_AWKWARD, "hidden": 3001},  # hidden not divisible by heads
        base | {"model": "custom", **_AWKWARD, "kv_heads": 7},  # heads not divisible by kv heads
    ]
    return [{"input": c, "expected": evaluate(c)} for c in cases]


# ---------------------------------------------------------------- the page's experiment
def _plan(**kw) -> Plan:
    return plan_from(DEFAULTS | kw)


@experiment("calculator", "the live memory calculator's formulas, checked against independent sums", kind="computed")
def calculator(device: str) -> Result:
    r = Result("calculator")
    vecs = vectors()
    ok = [v for v in vecs if "error" not in v["expected"]]
    r.add("vectors", len(vecs), "", "test vectors the browser test types into the live page")
    r.add("vectors_fit", sum(v["expected"]["fits"] for v in ok), "", "vectors whose verdict is fits")
    r.add("vectors_refused", len(vecs) - len(ok), "", "vectors with inputs the page must refuse")
    r.claim(
        "the vectors include both verdicts",
        min(r.quantities["vectors_fit"].value, len(ok) - r.quantities["vectors_fit"].value),
        1,
        relation=">=",
        formula="fits and does-not-fit both present",
    )

    # Conservation: the shards of all N GPUs add back to 16 bytes per parameter, plus padding only
    # (less than one element per rank at each of the two splits, t p and d).
    for stage, copies in ((3, lambda i: i["gpus"]), (0, lambda i: i["tp"] * i["pp"])):
        chosen = [v for v in ok if v["input"]["zero"] == stage]
        pad = [
            (
                (v["expected"]["weights"] + v["expected"]["gradients"] + v["expected"]["optimizer"])
                * copies(v["input"])
                - 16 * v["expected"]["params"]
            )
            / (16 * v["input"]["gpus"])
            for v in chosen
        ]
        what = "N" if stage == 3 else "t x p"
        r.claim(
            f"ZeRO-{stage}: {what} x per-GPU states >= 16Ψ, worst of {len(chosen)} vectors",
            min(pad),
            0,
            relation=">=",
            formula="padding elements per GPU",
        )
        r.claim(
            f"ZeRO-{stage}: {what} x per-GPU states - 16Ψ is padding, worst of {len(chosen)} vectors",
            max(pad),
            2,
            relation="<=",
            formula="padding elements per GPU, < 2",
        )
    # Activations against the paper's Eq. 1 (a different function): no recompute, t = 1.
    base = _plan(recompute="none", zero=0)
    m = base.model
    eq1 = m.layers * published_bytes_per_layer(base.seq, base.micro_batch, m.hidden, m.heads)
    r.claim(
        "activations, no recompute, t = 1: L sbh(34 + 5as/h)",
        memory(base)["activations"],
        eq1,
        rel_tol=1e-12,
        unit="B",
        formula="Korthikanti et al. Eq. 1",
    )
    # Each ZeRO stage shards one more category: per-GPU states never grow with the stage.
    states = [sum(memory(_plan(zero=z))[c] for c in ("weights", "gradients", "optimizer")) for z in ZERO_STAGES]
    for z in ZERO_STAGES[1:]:
        r.claim(f"ZeRO-{z} holds no more than ZeRO-{z - 1}", states[z], states[z - 1], relation="<=", unit="B")
    _worked(r)
    return r


def _worked(r: Result) -> None:
    """The numbers of the page's worked problems and its default example."""
    default_gpu = DEFAULTS["gpu"]
    r.add("default_gpu_bytes", gpu_memory_bytes()[default_gpu], "B", f"{default_gpu} memory")
    ddp = memory(_plan(zero=0))
    z3_plan = _plan(zero=3)
    z3 = memory(z3_plan)
    r.add("7b_params", ddp["params"], "params", "Llama 2 7B parameters")
    r.add("7b_ddp_states", ddp["weights"] + ddp["gradients"] + ddp["optimizer"], "B", "7B, ZeRO-0: model states")
    r.add("7b_ddp_total", ddp["total"], "B", "7B, ZeRO-0: total per GPU")
    r.add("7b_z3_states", z3["weights"] + z3["gradients"] + z3["optimizer"], "B", "7B, ZeRO-3, 8 GPUs: states")
    r.add("7b_z3_activations", z3["activations"], "B", "7B, s=4096, b=1, selective recompute: activations")
    r.add("7b_z3_total", z3["total"], "B", "7B, ZeRO-3, 8 GPUs: total per GPU")
    none = memory(_plan(zero=3, recompute="none"))
    full = memory(_plan(zero=3, recompute="full"))
    r.add("7b_act_none", none["activations"], "B", "activations without recompute")
    r.add("7b_act_full", full["activations"], "B", "activations with full recompute")
    b8 = memory(_plan(zero=3, micro_batch=8))
    r.add("7b_b8_total", b8["total"], "B", "7B, ZeRO-3, micro-batch 8, selective: total")
    r.add("7b_b8_fits", b8["fits"], "", "does micro-batch 8 fit")
    big = _plan(model="70B", gpus=64, tp=8, pp=4, zero=1)
    seventy = memory(big)
    r.add("70b_dp", seventy["dp"], "", "data-parallel replicas of 70B on 64 GPUs with TP 8, PP 4")
    r.add("70b_weights", seventy["weights"], "B", "70B TP8 PP4: weights per GPU")
    r.add("70b_optimizer", seventy["optimizer"], "B", "70B TP8 PP4 ZeRO-1: optimizer per GPU")
    r.add("70b_activations", seventy["activations"], "B", "70B TP8 PP4 selective: activations per GPU")
    r.add("70b_total", seventy["total"], "B", "70B TP8 PP4 ZeRO-1: total per GPU")
    r.add("70b_fits", seventy["fits"], "", "does it fit")
    sp = memory(dataclasses.replace(big, sequence_parallel=True))
    r.add("70b_sp_activations", sp["activations"], "B", "with sequence parallelism")
    rows = [[c, Quantity(z3[c], "B")] for c in CATEGORIES] + [["**total**", Quantity(z3["total"], "B")]]
    r.table(
        "default",
        ["category", "per GPU"],
        rows,
        caption=f"The default example: {z3_plan.model.name}, s = {z3_plan.seq}, b = {z3_plan.micro_batch}, "
        f"{z3_plan.gpus} x {default_gpu}, ZeRO-{z3_plan.zero}, {z3_plan.recompute} recompute",
    )
