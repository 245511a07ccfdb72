"""The live memory calculator: per-GPU training memory by category, and whether it fits.

One GPU of a (data x tensor x pipeline)-parallel job with AdamW holds

    weights      2Ψ' / d   when ZeRO stage >= 3, else 2Ψ'      Ψ' = ⌈Ψ / (t p)⌉, the model-parallel shard
    gradients    2Ψ' / d   when ZeRO stage >= 2                 (4 with Megatron's fp32 main_grad, 2 + 4 with an
    optimizer   12Ψ' / d   when ZeRO stage >= 1                  fp32 accumulation buffer: the `precision` option)
    activations  the architecture-exact bytes per layer (distlab.memory.activations, chapter 3) x layers
    logits       what the final norm, the head and the loss keep (s b V x 4 bytes of fp32 log-probabilities)

with d = GPUs / (t p) data-parallel replicas. The three model states are chapter 6's
`distlab.sharding.zero.model_state_bytes_per_gpu(Ψ', d, stage, precision)`: exact integers, a sharded state
padded to d⌈Ψ'/d⌉ elements. The model-parallel split is taken as even (Ψ' each), an approximation: real
pipelines put the embedding on the first stage and the head on the last.

Activations and logits are those of the most loaded pipeline stage, as the planner counts them: under 1F1B the
first stage keeps p micro-batches of its L/p layers in flight (L layers' worth, Korthikanti et al., Section
4.2.3); the last keeps one, and the logits. "Fits" compares the total with the same usable memory the planner
plans against (distlab.planner.config: the GPU's memory less a reserve for the CUDA context, NCCL buffers
and allocator fragmentation).

The page's JavaScript (docs/assets/calculator.js) implements these formulas once more, in the same
order of floating-point operations. The build writes test vectors computed here (`vectors()`), runs the
JavaScript on every one under Node (gen/assets.py), and the browser test types every one into the live page.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distlab.core.experiments import experiment
from distlab.core.formatting import format_quantity
from distlab.core.results import Quantity, Result
from distlab.hardware.gpus import gpu, gpu_names
from distlab.memory.activations import (
    RECOMPUTE,
    logits_bytes,
    model_activation_bytes_per_layer,
    published_bytes_per_layer,
)
from distlab.memory.model_states import BYTES_PER_PARAM, DEFAULT_PRECISION, bytes_per_param
from distlab.models.shapes import ModelShape, catalog, published_params
from distlab.planner import config as planner_config
from distlab.sharding.zero import STAGES as ZERO_STAGES
from distlab.sharding.zero import bytes_per_param_by_state, model_state_bytes_per_gpu

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "logits")
ATTENTION = ("flash", "eager")
PRECISIONS = tuple(BYTES_PER_PARAM)  # mixed (16 B/param, the default), mixed-fp32-grads, mixed-fp32-accum, fp32
PRESETS = ("1B", "7B", "13B", "70B", "Llama-3-8B", "Llama-3-70B", "Llama-3-405B", "175B", "Mixtral-8x7B")


def gpu_memory_bytes() -> dict[str, float]:
    """GPU name -> memory capacity in bytes as the driver reports it (an H100 "80 GB": 81,559 MiB), the
    datasheet's bytes where no report is on file: the planner's (distlab.planner.config.device_capacity_bytes)."""
    return {name: planner_config.device_capacity_bytes(gpu(name)) for name in gpu_names()}


def usable_bytes_by_gpu() -> dict[str, float]:
    """GPU name -> bytes a plan may fill: the planner's usable memory (capacity less the CUDA context and the
    allocator's fragmentation margin, distlab.planner.config.usable_bytes), never a copy."""
    return {name: planner_config.usable_bytes(gpu(name)) for name in gpu_names()}


def usable_fraction(name: str | None = None) -> float:
    """The share of a GPU's reported memory a plan may fill (the planner's; default GPU when none is named)."""
    name = name or DEFAULTS["gpu"]
    return usable_bytes_by_gpu()[name] / gpu_memory_bytes()[name]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def presets() -> dict[str, ModelShape]:
    """The calculator's models: chapter presets, Llama 3 and a Mixtral-style MoE (distlab.models.shapes)."""
    known = catalog()
    return {name: known[name] for name in PRESETS}


def default_attention(m: ModelShape) -> str:
    """FlashAttention for Llama-family models (how they are trained); GPT-3 predates it."""
    return "flash" if m.mlp == "swiglu" else "eager"


@dataclass(frozen=True, kw_only=True)
class Job:
    """One training job, as the calculator page's form holds it."""

    model: ModelShape
    """The model's shape (a preset or a custom one); its parameter count follows from it alone."""
    seq: int
    """Training sequence length s (tokens)."""
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
    attention: str = "flash"
    """flash (FlashAttention: no s x s matrices kept) or eager (the scores materialised and saved)."""
    dropout: bool = False
    """Dropout masks (GPT-3-era training; Llama trains without)."""
    precision: str = DEFAULT_PRECISION
    """Bytes per parameter of the model states: mixed (16), mixed-fp32-grads (18), mixed-fp32-accum (20), fp32."""
    capacity_factor: float | None = None
    """MoE expert capacity factor; None: dropless. A dense model ignores it."""

    def __post_init__(self) -> None:
        for name in ("seq", "micro_batch", "gpus", "tp", "pp"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name} must be a positive whole number, got {v!r}")
        if self.zero not in ZERO_STAGES:
            raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {self.zero!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {self.recompute!r}")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention must be flash or eager, not {self.attention!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.gpu not in gpu_memory_bytes():
            raise ValueError(f"unknown GPU {self.gpu!r}; known: {', '.join(gpu_memory_bytes())}")
        if self.gpus % (self.tp * self.pp):
            raise ValueError(f"GPUs ({self.gpus}) must be a multiple of TP x PP ({self.tp * self.pp})")
        if self.model.heads % self.tp:
            raise ValueError(f"attention heads ({self.model.heads}) must be divisible by TP ({self.tp})")
        if self.model.layers % self.pp:
            raise ValueError(f"layers ({self.model.layers}) must split evenly into PP ({self.pp}) stages")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"capacity factor must be positive, got {self.capacity_factor!r}")

    @property
    def dp(self) -> int:
        """Data-parallel replicas d = N / (t p)."""
        return self.gpus // (self.tp * self.pp)


def shape(model: str, **custom) -> ModelShape:
    """A preset by name (its own shape, whatever sequence is trained), or model="custom" with layers, hidden,
    heads, kv_heads, ffn, vocab, mlp, tie_embeddings, context (its learned positions, GPT-style models only),
    experts and top_k (0 for a dense model)."""
    if model == "custom":
        fields = dict(custom)
        fields["seq"] = fields.pop("context")
        if not fields.get("experts"):
            fields["experts"], fields["top_k"] = 0, 0
        return ModelShape(name="custom", **fields)
    known = presets()
    if model not in known:
        raise ValueError(f"unknown model preset {model!r}; known: {', '.join(known)}, custom")
    return known[model]


def job_memory(job: Job) -> dict:
    """Per-GPU bytes by category on the most loaded pipeline stage, their total, the GPU's capacity and the
    usable part of it, and whether it fits.

    The floating-point operations here and in calculator.js are the same, in the same order."""
    m, t, p, d = job.model, job.tp, job.pp, job.dp
    params = m.params()
    shard = ceil_div(params, t * p)  # Ψ' parameters on one model-parallel rank (an even split, rounded up)
    states = model_state_bytes_per_gpu(shard, d, job.zero, precision=job.precision)
    per_layer = model_activation_bytes_per_layer(
        m,
        job.seq,
        job.micro_batch,
        tp=t,
        sequence_parallel=job.sequence_parallel,
        recompute=job.recompute,
        attention=job.attention,
        dropout=job.dropout,
        capacity_factor=job.capacity_factor,
    )
    logits = logits_bytes(m, job.seq, job.micro_batch, tp=t, sequence_parallel=job.sequence_parallel)
    first = per_layer * m.layers  # L/p layers x p micro-batches in flight on the first stage
    last = per_layer * (m.layers // p)  # the last stage: its L/p layers, one micro-batch, and the logits
    if p == 1:
        stage, activations = "only", first
    elif last + logits <= first:
        stage, activations, logits = "first", first, 0
    else:
        stage, activations = "last", last
    weights, gradients, optimizer = states["params_bytes"], states["grads_bytes"], states["optimizer_bytes"]
    total = weights + gradients + optimizer + activations + logits
    capacity = gpu_memory_bytes()[job.gpu]
    usable = usable_bytes_by_gpu()[job.gpu]
    return {
        "params": params,
        "dp": d,
        "weights": weights,
        "gradients": gradients,
        "optimizer": optimizer,
        "activations": activations,
        "logits": logits,
        "total": total,
        "capacity": capacity,
        "usable": usable,
        "reserved": capacity - usable,
        "stage": stage,
        "fits": total <= usable,
    }


# ---------------------------------------------------------------- what the page and its tests read
SHAPE_FIELDS = (
    "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "tie_embeddings", "context", "experts", "top_k"
)  # fmt: skip
DEFAULTS = {
    "model": "7B",
    "seq": 4096,
    "micro_batch": 1,
    "gpus": 8,
    "gpu": "H100-SXM",
    "zero": 3,
    "tp": 1,
    "pp": 1,
    "recompute": "none",
    "sequence_parallel": False,
    "attention": "flash",
    "dropout": False,
    "precision": DEFAULT_PRECISION,
    "capacity_factor": 0,
}
"""The form's first state: Llama 2 7B as it trains (FlashAttention, no dropout) on one 8-GPU node."""


def preset_fields(m: ModelShape) -> dict:
    """What choosing a preset puts in the form: its shape, its training sequence and its training defaults."""
    return {
        "name": m.name,
        "seq": m.seq,
        **{k: getattr(m, k) for k in SHAPE_FIELDS if k not in ("kv_heads", "context", "ffn")},
        "kv_heads": m.kv,
        "ffn": m.expert_ffn if m.experts else m.ffn,
        "context": m.seq,
        "attention": default_attention(m),
        "dropout": m.trains_with_dropout,
    }


def job_from(inputs: dict) -> Job:
    """A Job from the form's fields (the keys of a test vector's "input")."""
    custom = {k: inputs[k] for k in SHAPE_FIELDS} if inputs["model"] == "custom" else {}
    cf = inputs.get("capacity_factor") or None
    return Job(
        model=shape(inputs["model"], **custom),
        seq=inputs["seq"],
        micro_batch=inputs["micro_batch"],
        gpus=inputs["gpus"],
        gpu=inputs["gpu"],
        zero=inputs["zero"],
        tp=inputs["tp"],
        pp=inputs["pp"],
        recompute=inputs["recompute"],
        sequence_parallel=inputs["sequence_parallel"],
        attention=inputs["attention"],
        dropout=inputs["dropout"],
        precision=inputs["precision"],
        capacity_factor=cf,
    )


def evaluate(inputs: dict) -> dict:
    """What the page must show for these inputs: the numbers and their text as the site formats them
    (`display`), or {"error": message}."""
    try:
        out = job_memory(job_from(inputs))
    except ValueError as exc:
        return {"error": str(exc)}
    keys = (*CATEGORIES, "total", "capacity", "usable", "reserved")
    out["display"] = {k: format_quantity(out[k], "B") for k in keys}
    out["display"]["params"] = format_quantity(out["params"], "params")
    return out


def site_data() -> dict:
    """Everything calculator.js needs besides its formulas: presets, GPUs, the usable fraction, bytes per
    parameter by precision, defaults."""
    return {
        "presets": {name: preset_fields(m) for name, m in presets().items()},
        "gpus": gpu_memory_bytes(),
        "usable_bytes": usable_bytes_by_gpu(),
        "bytes_per_param": {prec: bytes_per_param_by_state(prec) for prec in PRECISIONS},
        "recompute": list(RECOMPUTE),
        "attention": list(ATTENTION),
        "precisions": list(PRECISIONS),
        "zero": list(ZERO_STAGES),
        "defaults": DEFAULTS,
    }


_AWKWARD = {
    "layers": 30,
    "hidden": 3000,
    "heads": 24,
    "kv_heads": 8,
    "ffn": 7776,
    "vocab": 50257,
    "mlp": "swiglu",
    "tie_embeddings": False,
    "context": 4096,
    "experts": 0,
    "top_k": 0,
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
    "context": 1024,
    "experts": 0,
    "top_k": 0,
}
_MOE = {
    "layers": 6,
    "hidden": 1536,
    "heads": 12,
    "kv_heads": 4,
    "ffn": 1000,
    "vocab": 32000,
    "mlp": "swiglu",
    "tie_embeddings": False,
    "context": 4096,
    "experts": 16,
    "top_k": 3,
}


def _preset(name: str, **kw) -> dict:
    """The form after choosing preset `name` (its sequence and training defaults), then `kw`."""
    f = preset_fields(presets()[name])
    return DEFAULTS | {"model": name, "seq": f["seq"], "attention": f["attention"], "dropout": f["dropout"]} | kw


def vectors() -> list[dict]:
    """Test vectors for the live page: every preset on every GPU at its own sequence, Llama, GPT and MoE presets
    with FlashAttention on and off, every ZeRO stage, recompute mode and precision, awkward sizes (sequence
    97 and 1000, 3 and 12 GPUs, custom models with hidden 3000, an MoE of 16 experts), both verdicts, and
    inputs the page must refuse. Deterministic: the same list on every build."""
    all_gpus = list(gpu_memory_bytes())
    base = dict(DEFAULTS)
    cases: list[dict] = []
    for name in presets():  # every preset on every GPU, at its own sequence length and defaults
        for gpu_name in all_gpus:
            cases.append(_preset(name, gpu=gpu_name))
    for name in ("7B", "Llama-3-8B", "175B", "Mixtral-8x7B"):  # Llama, GPT and MoE, flash on and off
        for attention in ATTENTION:
            for recompute in RECOMPUTE:
                cases.append(_preset(name, attention=attention, recompute=recompute, gpus=64, tp=8, zero=1))
    for zero in ZERO_STAGES:
        for precision in PRECISIONS:
            cases.append(base | {"zero": zero, "precision": precision})
    cases += [
        base | {"model": "1B", "gpus": 1, "zero": 0, "recompute": "none", "seq": 4096},
        base | {"model": "1B", "gpus": 3, "zero": 2, "seq": 97, "micro_batch": 3},
        base | {"model": "1B", "gpus": 7, "zero": 3, "seq": 257, "micro_batch": 2, "attention": "eager"},
        base | {"model": "custom", **_AWKWARD, "seq": 1000, "gpus": 9, "pp": 3, "zero": 3, "micro_batch": 1},
        base | {"model": "13B", "gpus": 12, "zero": 1, "seq": 1000, "micro_batch": 5, "dropout": True},
        _preset("70B", gpus=64, tp=8, pp=4, zero=1),
        _preset("70B", gpus=64, tp=8, pp=4, zero=1, sequence_parallel=True),
        _preset("70B", gpus=512, tp=8, pp=8, zero=3, recompute="full", micro_batch=2),
        _preset("Llama-3-405B", gpus=16384, tp=8, pp=16, zero=1, sequence_parallel=True, precision="mixed-fp32-grads"),
        _preset("Llama-3-8B", gpus=8, zero=3, seq=8192, micro_batch=2),
        _preset("Llama-3-8B", gpus=8, pp=4, zero=1, recompute="full"),  # the last stage, with the logits, is heavier
        _preset("Llama-3-70B", gpus=64, tp=8, pp=8, zero=1, sequence_parallel=True),
        _preset("175B", gpus=1024, tp=8, pp=16, zero=1, recompute="full"),
        _preset("175B", gpus=96, tp=4, pp=8, sequence_parallel=True),
        _preset("Mixtral-8x7B", gpus=64, tp=8, zero=1, capacity_factor=1.25),
        _preset("Mixtral-8x7B", gpus=16, tp=2, pp=2, zero=3, seq=4096, capacity_factor=0.5, attention="eager"),
        base | {"model": "custom", **_AWKWARD, "seq": 257, "gpus": 6, "tp": 2, "zero": 2, "micro_batch": 7},
        base | {"model": "custom", **_AWKWARD, "seq": 8192, "gpus": 30, "pp": 5, "tp": 2, "sequence_parallel": True},
        base
        | {
            "model": "custom",
            **_GPT_LIKE,
            "seq": 1024,
            "gpus": 2,
            "zero": 0,
            "micro_batch": 12,
            "attention": "eager",
            "dropout": True,
        },  # fmt: skip
        base | {"model": "custom", **_MOE, "seq": 2000, "gpus": 4, "zero": 2, "micro_batch": 3, "capacity_factor": 1.1},
        base | {"model": "custom", **_MOE, "seq": 512, "gpus": 6, "tp": 3, "zero": 1, "attention": "eager"},
        # inputs the page must refuse (the same ones distlab refuses)
        base | {"gpus": 6, "tp": 4},  # 6 GPUs are not a multiple of TP x PP
        base | {"model": "7B", "pp": 3, "gpus": 3},  # 32 layers do not split into 3 stages
        base | {"model": "13B", "tp": 3, "gpus": 3},  # 40 heads do not divide by TP 3
        base | {"model": "custom", **_AWKWARD, "hidden": 3001},  # hidden not divisible by heads
        base | {"model": "custom", **_AWKWARD, "kv_heads": 7},  # heads not divisible by kv heads
        base | {"model": "custom", **_AWKWARD, "ffn": 7777, "tp": 2, "gpus": 2},  # MLP width not divisible by TP
        _preset("70B", tp=8, gpus=8, seq=4097, sequence_parallel=True),  # sequence not divisible by TP with SP
        base | {"model": "custom", **_MOE, "top_k": 17},  # top-k beyond the experts
        base | {"model": "Mixtral-8x7B", "capacity_factor": -1},  # a negative capacity factor
    ]
    return [{"input": c, "expected": evaluate(c)} for c in cases]


# ---------------------------------------------------------------- the page's experiment
def _job(**kw) -> Job:
    return job_from(DEFAULTS | kw)


@experiment("calculator", "the live memory calculator's formulas, checked against independent sums", kind="computed")
def calculator(device: str) -> Result:
    r = Result("calculator")
    vecs = vectors()
    ok = [v for v in vecs if "error" not in v["expected"]]
    r.add("vectors", len(vecs), "", "test vectors the build runs under Node and the browser test types in")
    r.add("vectors_fit", sum(v["expected"]["fits"] for v in ok), "", "vectors whose verdict is fits")
    r.add("vectors_refused", len(vecs) - len(ok), "", "vectors with inputs the page must refuse")
    r.claim(
        "the vectors include both verdicts",
        min(r.quantities["vectors_fit"].value, len(ok) - r.quantities["vectors_fit"].value),
        1,
        relation=">=",
        formula="fits and does-not-fit both present",
    )
    _conservation(r, ok)
    _presets(r)
    _fits(r, ok)
    # Activations of the default job against Llama 2 7B's layer by hand (FlashAttention, no recompute):
    # 16sbh + 8sbf + 4abs + 8sb per layer, the multi-head case of chapter 3's closed form.
    m, s = presets()["7B"], DEFAULTS["seq"]
    by_hand = m.layers * (16 * s * m.hidden + 8 * s * m.ffn + 4 * m.heads * s + 8 * s)
    r.claim(
        "default job's activations = L (16sbh + 8sbf + 4abs + 8sb)", job_memory(_job())["activations"], by_hand,
        unit="B", formula="Llama 2 7B's own layer with FlashAttention",
    )  # fmt: skip
    eq1 = m.layers * published_bytes_per_layer(s, 1, m.hidden, m.heads)
    r.claim(
        "7B, eager attention, dropout on, GeLU MLP of width 4h: L sbh(34 + 5as/h) + 16sbL",
        job_memory(job_from(DEFAULTS | {"model": "custom", **preset_fields(m), "mlp": "gelu", "ffn": 4 * m.hidden,
                                         "attention": "eager", "dropout": True}))["activations"],
        eq1 + 16 * s * m.layers,
        rel_tol=1e-12,
        unit="B",
        formula="Korthikanti et al. Eq. 1 plus the LayerNorm statistics: the GPT block is the special case",
    )  # fmt: skip
    states = [sum(job_memory(_job(zero=z))[c] for c in ("weights", "gradients", "optimizer")) for z in ZERO_STAGES]
    for z in ZERO_STAGES[1:]:
        r.claim(f"ZeRO-{z} holds no more than ZeRO-{z - 1}", states[z], states[z - 1], relation="<=", unit="B")
    _worked(r)
    return r


def _conservation(r: Result, ok: list) -> None:
    """The shards of all N GPUs add back to the precision's bytes per parameter, plus padding only (less than
    one element per rank at each of the two splits, t p and d)."""
    for stage, copies in ((3, lambda i: i["gpus"]), (0, lambda i: i["tp"] * i["pp"])):
        chosen = [v for v in ok if v["input"]["zero"] == stage]
        pad = []
        for v in chosen:
            per = bytes_per_param(v["input"]["precision"])
            held = v["expected"]["weights"] + v["expected"]["gradients"] + v["expected"]["optimizer"]
            pad.append((held * copies(v["input"]) - per * v["expected"]["params"]) / (per * v["input"]["gpus"]))
        what = "N" if stage == 3 else "t x p"
        r.claim(
            f"ZeRO-{stage}: {what} x per-GPU states >= bytes/param x Ψ, worst of {len(chosen)} vectors",
            min(pad),
            0,
            relation=">=",
            formula="padding elements per GPU",
        )
        r.claim(
            f"ZeRO-{stage}: {what} x per-GPU states - bytes/param x Ψ is padding, worst of {len(chosen)} vectors",
            max(pad),
            2,
            relation="<=",
            formula="padding elements per GPU, < 2",
        )


def _presets(r: Result) -> None:
    """Parameter counts from the shapes against the counts the released checkpoints report."""
    for name, m in presets().items():
        published = published_params(name)
        if published is None:
            continue
        slug = name.lower().replace("-", "_")
        r.claim(f"{m.name}: parameters from its shape = the checkpoint's count", m.params(), published)
        r.add(f"params_{slug}", m.params(), "params", f"{m.name} parameters")
    mix = presets()["Mixtral-8x7B"]
    r.add("mixtral_active", mix.active_params(), "params", "Mixtral 8x7B parameters one token passes through")
    r.claim(
        "Mixtral 8x7B: active parameters round to the paper's 13B",
        round(mix.active_params() / 1e9),
        13,
        formula="Jiang et al. 2024, Section 1: 47B parameters, 13B active",
    )
    r.claim("Mixtral 8x7B: total parameters round to the paper's 47B", round(mix.params() / 1e9), 47)


def _fits(r: Result, ok: list) -> None:
    """The verdict is the planner's: total against the GPU's memory less the planner's reserve."""
    limit = usable_bytes_by_gpu()
    wrong = sum(v["expected"]["fits"] != (v["expected"]["total"] <= limit[v["input"]["gpu"]]) for v in ok)
    r.claim("every vector's verdict = total <= the planner's usable memory", wrong, 0, formula="vectors that differ")
    cap = gpu_memory_bytes()[DEFAULTS["gpu"]]
    r.add("usable_fraction", usable_fraction(), "fraction", "share of a GPU's memory a plan may fill (the planner's)")
    r.add("reserve_fraction", 1 - usable_fraction(), "fraction", "share kept in reserve")
    r.add("default_usable_bytes", usable_bytes_by_gpu()[DEFAULTS["gpu"]], "B", f"{DEFAULTS['gpu']}: usable memory")
    r.add("default_reserved_bytes", cap - usable_bytes_by_gpu()[DEFAULTS["gpu"]], "B", f"{DEFAULTS['gpu']}: reserved")


def _worked(r: Result) -> None:
    """The numbers of the page's worked problems and its default example."""
    default_gpu = DEFAULTS["gpu"]
    r.add("default_gpu_bytes", gpu_memory_bytes()[default_gpu], "B", f"{default_gpu} memory")
    for precision, want in (("mixed", 2 + 2 + 12), ("mixed-fp32-grads", 2 + 4 + 12), ("mixed-fp32-accum", 2 + 6 + 12)):
        r.claim(f"{precision}: bytes per parameter = weights + gradients + optimizer by hand",
                sum(site_data()["bytes_per_param"][precision].values()), want, unit="B")  # fmt: skip
    r.add("bytes_per_param", bytes_per_param(DEFAULT_PRECISION), "B", "default model-state bytes per parameter")
    r.add("bytes_per_param_fp32_grads", bytes_per_param("mixed-fp32-grads"), "B", "with Megatron's fp32 main_grad")
    r.add("bytes_per_param_fp32_accum", bytes_per_param("mixed-fp32-accum"), "B", "with fp32 accumulation")
    ddp = job_memory(_job(zero=0))
    z3_job = _job(zero=3)
    z3 = job_memory(z3_job)
    r.add("7b_params", ddp["params"], "params", "Llama 2 7B parameters")
    r.add("7b_ddp_states", ddp["weights"] + ddp["gradients"] + ddp["optimizer"], "B", "7B, ZeRO-0: model states")
    r.add("7b_ddp_total", ddp["total"], "B", "7B, ZeRO-0: total per GPU")
    r.add("7b_z3_states", z3["weights"] + z3["gradients"] + z3["optimizer"], "B", "7B, ZeRO-3, 8 GPUs: states")
    r.add("7b_z3_activations", z3["activations"], "B", "7B, s=4096, b=1, FlashAttention: activations")
    r.add("7b_z3_logits", z3["logits"], "B", "7B, s=4096, b=1: head and loss")
    r.add("7b_z3_total", z3["total"], "B", "7B, ZeRO-3, 8 GPUs: total per GPU")
    r.add("7b_z3_fp32_grads_total", job_memory(_job(zero=3, precision="mixed-fp32-grads"))["total"], "B",
          "7B, ZeRO-3, 8 GPUs, fp32 main_grad: total per GPU")  # fmt: skip
    eager = job_memory(_job(zero=3, attention="eager"))
    selective = job_memory(_job(zero=3, attention="eager", recompute="selective"))
    full = job_memory(_job(zero=3, recompute="full"))
    r.add("7b_act_eager", eager["activations"], "B", "activations, eager attention, no recompute")
    r.add("7b_act_eager_selective", selective["activations"], "B", "activations, eager, selective recompute")
    r.add("7b_act_full", full["activations"], "B", "activations with full recompute")
    b8 = job_memory(_job(zero=3, micro_batch=8))
    r.add("7b_b8_total", b8["total"], "B", "7B, ZeRO-3, micro-batch 8, FlashAttention: total")
    r.add("7b_b8_fits", b8["fits"], "", "does micro-batch 8 fit")
    b8_full = job_memory(_job(zero=3, micro_batch=8, recompute="full"))
    r.add("7b_b8_full_total", b8_full["total"], "B", "7B, ZeRO-3, micro-batch 8, full recompute: total")
    r.add("7b_b8_full_fits", b8_full["fits"], "", "does it fit with full recompute")
    big = _job(model="70B", gpus=64, tp=8, pp=4, zero=1)
    seventy = job_memory(big)
    r.add("70b_dp", seventy["dp"], "", "data-parallel replicas of 70B on 64 GPUs with TP 8, PP 4")
    r.add("70b_weights", seventy["weights"], "B", "70B TP8 PP4: weights per GPU")
    r.add("70b_optimizer", seventy["optimizer"], "B", "70B TP8 PP4 ZeRO-1: optimizer per GPU")
    m70, s = presets()["70B"], big.seq
    by_hand = m70.layers * (8 * s * m70.hidden + 8 * s + (4 * s * m70.hidden + 4 * s * m70.hidden * m70.kv // m70.heads
                                                          + 4 * m70.heads * s + 8 * s * m70.ffn) / 8)  # fmt: skip
    r.claim("70B TP8 PP4: first stage's activations = L (8sbh + 8sb + (4sbh + 4sbh·g/a + 4abs + 8sbf)/t)",
            seventy["activations"], by_hand, rel_tol=1e-12, unit="B")  # fmt: skip
    r.add("70b_activations", seventy["activations"], "B", "70B TP8 PP4, FlashAttention: activations per GPU")
    r.add("70b_total", seventy["total"], "B", "70B TP8 PP4 ZeRO-1: total per GPU")
    r.add("70b_fits", seventy["fits"], "", "does it fit")
    sp = job_memory(dataclasses.replace(big, sequence_parallel=True))
    r.add("70b_sp_activations", sp["activations"], "B", "with sequence parallelism")
    l3 = presets()["Llama-3-8B"]
    l3job = job_from(_preset("Llama-3-8B", gpus=8, zero=3))
    l3mem = job_memory(l3job)
    r.add("l3_logits", l3mem["logits"], "B", "Llama 3 8B, s = 8192, b = 1: head and loss")
    r.add("l3_activations", l3mem["activations"], "B", "Llama 3 8B, s = 8192, b = 1: activations")
    r.add("l3_total", l3mem["total"], "B", "Llama 3 8B on 8 GPUs, ZeRO-3: total")
    r.add("l3_fits", l3mem["fits"], "", "does it fit")
    s = l3job.seq
    r.claim("Llama 3 8B: logits = 4sbV + 4sbh + 12sb + 4", l3mem["logits"],
            4 * s * l3.vocab + 4 * s * l3.hidden + 12 * s + 4, unit="B")  # fmt: skip
    mix = job_memory(job_from(_preset("Mixtral-8x7B", gpus=64, tp=8, zero=1, seq=4096)))
    mx, s, t = presets()["Mixtral-8x7B"], 4096, 8  # by hand: TP 8 without sequence parallelism, dropless, flash
    h, d, k, f = mx.hidden, mx.head_dim, mx.top_k, mx.expert_ffn
    n = s * k
    layer = (8 * s * h + 8 * s  # norm inputs and statistics, the q/k/v and router inputs: whole on every rank
             + (2 * s * h + 2 * s * h + 4 * mx.heads * s) // t + 2 * 2 * s * d  # Q, O, log-sum-exp; one KV head each
             + 12 * s * k + 18 * n + 4 * n * h + 8 * n * f // t)  # router, slots, experts at f/t  # fmt: skip
    r.claim("Mixtral 8x7B, TP 8, s = 4096: activations = L × the MoE layer by hand", mix["activations"],
            mx.layers * layer, unit="B")  # fmt: skip
    r.add("mixtral_activations", mix["activations"], "B", "Mixtral 8x7B, s = 4096, TP 8, dropless: activations")
    r.add("mixtral_total", mix["total"], "B", "Mixtral 8x7B on 64 GPUs, TP 8, ZeRO-1, s = 4096: total")
    r.add("mixtral_fits", mix["fits"], "", "does it fit")
    rows = [[c, Quantity(z3[c], "B")] for c in CATEGORIES] + [["**total**", Quantity(z3["total"], "B")]]
    rows.append([f"usable ({default_gpu} less the reserve)", Quantity(z3["usable"], "B")])
    r.table(
        "default",
        ["category", "per GPU"],
        rows,
        caption=f"The default example: {z3_job.model.name}, s = {z3_job.seq}, b = {z3_job.micro_batch}, "
        f"{z3_job.gpus} x {default_gpu}, ZeRO-{z3_job.zero}, FlashAttention, recompute {z3_job.recompute} "
        "(computed)",
    )
