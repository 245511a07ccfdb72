"""3D (and 4D, 5D) parallelism decision rules, as code: given a model and a cluster, which tensor (t),
pipeline (p), data (d), context (c) and expert (e) parallel sizes, and which ZeRO stage.

The rules (Narayanan et al. 2021, https://arxiv.org/abs/2104.04473, Section 3 "takeaways"):

1. Tensor parallelism inside an NVLink domain only: its four all-reduces per layer carry activations,
   and their cost against the layer's compute is 2(t-1)F / (9 h B) (F FLOP/s, B link bytes/s, h width);
   over a network link that is well above 1.
2. Pipeline parallelism across nodes: it sends one activation per micro-batch per stage boundary,
   and costs the bubble (p-1)/m of compute (distlab.pipeline).
3. Data parallelism (with ZeRO-1, or ZeRO-3 when the states do not fit otherwise) for the rest.
4. Context parallelism when one sequence's activations do not fit (long contexts).
5. Expert parallelism for mixture-of-experts layers, over data-parallel ranks.

`recommend` searches every (t, p, d, c, e, ZeRO) that tiles the cluster and fits in memory, and
ranks them by an estimate of communication and bubble time over compute time (no overlap assumed:
an upper bound used only to rank). The rules above are not hard-coded preferences: apart from "t
within a node", they fall out of that ranking, and the experiment's table shows it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

from distlab.activations import activation_bytes_per_layer
from distlab.experiments import experiment
from distlab.facts import value
from distlab.model_shapes import ModelShape, preset
from distlab.pipeline import bubble_fraction
from distlab.results import Quantity, Result


@dataclass(frozen=True, kw_only=True)
class Cluster:
    name: str = "custom"
    """Display name."""
    gpus_per_node: int = 8
    """GPUs in one NVLink (or PCIe) domain."""
    nodes: int = 1
    """Nodes, joined by the network."""
    hbm_gb: float = 80.0
    """Memory per GPU, GB (1e9 bytes)."""
    peak_tflops: float = 989.0
    """Dense bf16 TFLOP/s per GPU."""
    intra_gbytes_per_s: float = 450.0
    """Per GPU, per direction, inside a node (NVLink 4: 450)."""
    inter_gbytes_per_s: float = 50.0
    """Per GPU, per direction, between nodes (one 400 Gb/s NIC per GPU: 50)."""

    def __post_init__(self) -> None:
        for name in ("gpus_per_node", "nodes", "hbm_gb", "peak_tflops", "intra_gbytes_per_s", "inter_gbytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"cluster {self.name}: {name} must be positive, got {getattr(self, name)}")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def cluster(name: str, nodes: int, *, gpu: str = "H100-SXM", intra: str = "NVLink4-H100",
            inter: str = "InfiniBand-NDR", gpus_per_node: int = 8) -> Cluster:
    """A cluster from the data files: GPU facts from gpus.toml, links from interconnect.toml."""
    from distlab.collectives import per_direction_bytes_per_s

    return Cluster(name=name, gpus_per_node=gpus_per_node, nodes=nodes, hbm_gb=value(f"gpus.{gpu}.hbm_gb"),
                   peak_tflops=value(f"gpus.{gpu}.bf16_dense_tflops"),
                   intra_gbytes_per_s=per_direction_bytes_per_s(intra) / 1e9,
                   inter_gbytes_per_s=per_direction_bytes_per_s(inter) / 1e9)


@dataclass(frozen=True, kw_only=True)
class Workload:
    seq: int | None = None
    """Sequence length; default the model's."""
    micro_batch: int = 1
    """Sequences per micro-batch."""
    global_batch_tokens: int = 4 * 1024 * 1024
    """Tokens per optimizer step (Llama 2 trained with about 4M)."""
    recompute: str | None = None
    """Activation recomputation, selective or full (distlab.activations); None: try both."""
    experts: int = 0
    """Experts per MoE layer (0: dense). Each expert is a copy of the model's MLP."""
    top_k: int = 2
    """Experts per token, for MoE."""
    usable_fraction: float = 0.9
    """Share of HBM a plan may fill (the rest: CUDA context, NCCL buffers, fragmentation)."""
    long_seq: int = 32768
    """Context parallelism is considered from this sequence length on."""


@dataclass
class Plan:
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    zero: int
    microbatches: int
    """Micro-batches per pipeline per step."""
    recompute: str
    memory: dict[str, float]
    """Bytes per GPU by category (the most loaded pipeline stage)."""
    overheads: dict[str, float]
    """Estimated time over compute time, by cause (no overlap: an upper bound)."""
    budget_bytes: float
    reasons: list[str] = field(default_factory=list)

    @property
    def memory_bytes(self) -> float:
        return sum(self.memory.values())

    @property
    def overhead(self) -> float:
        return sum(self.overheads.values())

    def label(self) -> str:
        parts = [f"TP {self.tp}", f"PP {self.pp}", f"DP {self.dp}"] + ([f"CP {self.cp}"] if self.cp > 1 else []) \
            + ([f"EP {self.ep}"] if self.ep > 1 else [])
        return " x ".join(parts) + f", ZeRO-{self.zero}, {self.recompute} recompute"

    def to_dict(self) -> dict:
        return asdict(self) | {"memory_bytes": self.memory_bytes, "overhead": self.overhead, "label": self.label()}


def as_shape(model) -> ModelShape:
    """A preset name ("70B"), a ModelShape, or a parameter count: then a Llama-like shape with width
    128 x depth (Kaplan et al. 2020's aspect ratio) and 128-wide heads."""
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, str):
        return preset(model)
    params = float(model)
    if not params > 0:
        raise ValueError(f"model parameters must be positive, got {model}")
    layers = max(1, round((params / (12 * 128**2)) ** (1 / 3)))
    hidden = 128 * layers
    return ModelShape(name=f"{params / 1e9:.3g}B", layers=layers, hidden=hidden, heads=hidden // 128,
                      ffn=int(8 / 3 * hidden / 128 + 1) * 128, vocab=32000)


# ---------------------------------------------------------------- memory and time of one plan
def memory_per_gpu(m: ModelShape, w: Workload, *, tp: int, pp: int, dp: int, cp: int, ep: int, zero: int,
                   microbatches: int, recompute: str = "selective") -> dict[str, float]:
    """Bytes on the first pipeline stage's GPU (it holds the embedding and the most activations)."""
    seq = w.seq or m.seq
    mlp = (3 if m.mlp == "swiglu" else 2) * m.hidden * m.ffn
    moe_extra = m.layers * mlp * (max(w.experts, 1) / ep - 1)  # experts beyond the dense MLP, this rank's share
    if pp == 1:
        params = (m.params() + moe_extra) / tp
    else:  # the first stage: its layers and the token embedding
        params = (m.layers / pp * m.params_per_layer() + moe_extra / pp + m.vocab * m.hidden) / tp
    shard = {0: (1, 1, 1), 1: (1, 1, dp), 2: (1, dp, dp), 3: (dp, dp, dp)}[zero]  # weights, grads, optimizer
    in_flight = min(pp, microbatches)  # 1F1B: the first stage holds p micro-batches (distlab.pipeline)
    act = activation_bytes_per_layer(seq // cp, w.micro_batch, m.hidden, m.heads, tp=tp, sequence_parallel=tp > 1,
                                     recompute=recompute) * m.layers / pp * in_flight
    if recompute == "full":  # backward recomputes one layer at a time: its activations exist meanwhile
        act += activation_bytes_per_layer(seq // cp, w.micro_batch, m.hidden, m.heads, tp=tp,
                                          sequence_parallel=tp > 1, recompute="selective")
    logits = seq // cp * w.micro_batch * m.vocab * 4 / tp  # fp32 logits for the loss (last stage)
    return {"weights": 2 * params / shard[0], "gradients": 2 * params / shard[1],
            "optimizer": 12 * params / shard[2], "activations": act, "logits": logits}


def overheads(m: ModelShape, c: Cluster, w: Workload, *, tp: int, pp: int, dp: int, cp: int, ep: int, zero: int,
              microbatches: int, recompute: str = "selective") -> dict[str, float]:
    """Time that is not useful compute, over compute time, by cause, at peak FLOP/s and link speed.
    On the critical path: tensor-parallel all-reduces, the expert all-to-alls, the pipeline bubble,
    full recomputation (one more forward: 1/3). Overlapped with compute, so only the excess counts:
    data-parallel traffic (with backward and the next forward) and the context-parallel ring (with
    attention)."""
    seq = w.seq or m.seq
    flops = c.peak_tflops * 1e12
    intra, inter = c.intra_gbytes_per_s * 1e9, c.inter_gbytes_per_s * 1e9
    tokens = seq // cp * w.micro_batch  # per micro-batch, per context-parallel rank
    compute_layer = 6 * m.params_per_layer() * tokens / tp / flops  # forward + backward, one layer, one micro-batch
    act = tokens * m.hidden * 2  # one (s, b, h) bf16 activation
    out = {"tensor": 4 * 2 * (tp - 1) / tp * act / (intra if tp <= c.gpus_per_node else inter) / compute_layer}
    out["pipeline bubble"] = (lambda b: b / (1 - b))(bubble_fraction(pp, microbatches)) if pp > 1 else 0.0
    out["recompute"] = 1 / 3 if recompute == "full" else 0.0  # selective recompute's few % are not counted
    if cp > 1:
        ring = 3 * (cp - 1) * 2 * tokens * m.kv * m.head_dim * 2 / (intra if tp * cp <= c.gpus_per_node else inter)
        attention = 3 * 4 * tokens * tokens * cp * m.hidden / tp / 2 / flops  # causal: half of 4 s^2 h, x3 for bwd
        out["context"] = max(0.0, ring - attention) / compute_layer
    if w.experts:
        a2a = 4 * w.top_k * act * (ep - 1) / ep  # dispatch + combine, forward + backward
        out["expert all-to-all"] = a2a / (intra if tp * ep <= c.gpus_per_node else inter) / compute_layer
    params_gpu = m.params() / (tp * pp)
    volume = (3 if zero == 3 else 2) * (dp - 1) / dp * 2 * params_gpu  # bytes each rank sends per step
    dp_link = intra if tp * cp * dp <= c.gpus_per_node else inter
    compute_step = 6 * params_gpu * tokens * microbatches / flops
    out["data"] = max(0.0, volume / dp_link - compute_step) / compute_step
    return out


def plans(model, c: Cluster, w: Workload = Workload()) -> list[Plan]:
    """Every plan that tiles the cluster and fits, best (least estimated overhead) first."""
    m = as_shape(model)
    seq = w.seq or m.seq
    budget = c.hbm_gb * 1e9 * w.usable_fraction
    recomputes = (w.recompute,) if w.recompute else ("selective", "full")
    out = []
    for tp in _powers(c.gpus_per_node):
        if m.heads % tp or m.kv % tp:
            continue
        for cp in _powers(c.gpus):
            if cp > 1 and (seq < w.long_seq or seq % (2 * cp)):
                continue
            for pp in _powers(c.gpus // (tp * cp)):
                if m.layers % pp:
                    continue
                dp = c.gpus // (tp * cp * pp)
                microbatches = w.global_batch_tokens // (seq * w.micro_batch * dp)
                if microbatches < 1 or (pp > 1 and microbatches < pp):
                    continue
                for ep in (_powers(min(dp, w.experts)) if w.experts else [1]):
                    if w.experts and (w.experts % ep or dp % ep):
                        continue
                    for zero, recompute in itertools.product((1, 3), recomputes):
                        kw = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, zero=zero, microbatches=microbatches,
                                  recompute=recompute)
                        mem = memory_per_gpu(m, w, **kw)
                        if sum(mem.values()) <= budget:
                            out.append(Plan(**kw, memory=mem, overheads=overheads(m, c, w, **kw), budget_bytes=budget))
    out.sort(key=lambda p: (round(p.overhead, 6), p.tp * p.pp * p.cp, p.zero, p.recompute != "selective"))
    return out


def recommend(model, cluster: Cluster, workload: Workload = Workload()) -> Plan | None:
    """The best plan (or None: nothing fits), with the reasons in words."""
    found = plans(model, cluster, workload)
    if not found:
        return None
    best = found[0]
    best.reasons = _reasons(as_shape(model), cluster, workload, best)
    return best


def _reasons(m: ModelShape, c: Cluster, w: Workload, p: Plan) -> list[str]:
    o = p.overheads
    out = [f"fits: {p.memory_bytes / 1e9:.1f} GB of {p.budget_bytes / 1e9:.0f} GB usable per GPU"]
    if p.tp > 1:
        out.append(f"TP {p.tp} inside a {c.gpus_per_node}-GPU node: all-reduces cost {o['tensor']:.0%} of compute")
    if p.pp > 1:
        out.append(f"PP {p.pp} across nodes: bubble {o['pipeline bubble']:.1%} of compute with {p.microbatches} "
                   "micro-batches")
    out.append(f"DP {p.dp} with ZeRO-{p.zero}: traffic not hidden behind compute {o['data']:.1%}")
    if p.recompute == "full":
        out.append("full recomputation: one more forward pass (+33 % compute) so the activations fit")
    if p.cp > 1:
        out.append(f"CP {p.cp}: sequence {w.seq or m.seq} split so activations fit; ring not hidden "
                   f"{o['context']:.0%}")
    if p.ep > 1:
        out.append(f"EP {p.ep}: experts spread over data-parallel ranks; all-to-all {o['expert all-to-all']:.0%}")
    return out


def _powers(limit: int) -> list[int]:
    return [2**i for i in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


# ---------------------------------------------------------------- closed forms the page quotes
def tp_overhead_closed_form(tp: int, hidden: int, flops: float, link_bytes_per_s: float) -> float:
    """TP all-reduce time over layer compute for a 12h^2-parameter layer: four all-reduces of sbh x 2
    bytes at 2(t-1)/t each, against 6 x 12h^2 x sb / t FLOPs: 2(t-1)F / (9 h B)."""
    return 2 * (tp - 1) * flops / (9 * hidden * link_bytes_per_s)


def zero3_hidden_tokens(flops: float, link_bytes_per_s: float) -> float:
    """ZeRO-3 sends 3 x 2 bytes per (local) parameter per step and computes 6 FLOPs per parameter per
    token: its traffic fits under compute when each replica processes more than F / B tokens per step."""
    return flops / link_bytes_per_s


# ---------------------------------------------------------------- the experiment
MODELS = ("7B", "13B", "70B", "175B")
LONG_SEQ = 131072


def clusters() -> dict[str, Cluster]:
    return {"1 node, 8 H100, NVLink": cluster("1x8 H100", 1),
            "8 nodes, 64 H100, NVLink + IB NDR": cluster("8x8 H100", 8),
            "128 nodes, 1024 H100, NVLink + IB NDR": cluster("128x8 H100", 128),
            "8 nodes, 64 A100, PCIe 4 + 100 GbE": cluster("8x8 A100 PCIe", 8, gpu="A100-SXM-80GB", intra="PCIe4-x16",
                                                          inter="Ethernet-100G")}


@experiment("parallel-rules", "3D parallelism decision rules: the plan for 7B, 13B, 70B and 175B on typical "
            "clusters, searched and ranked by memory and communication", kind="computed")
def parallel_rules(device: str) -> Result:
    r = Result("parallel-rules")
    w = Workload()
    rows = []
    for name in MODELS:
        for label, c in clusters().items():
            found = plans(name, c, w)
            if not found:
                rows.append([name, label, "does not fit", "—", "—", "—"])
                continue
            p = recommend(name, c, w)
            r.claim(f"{name} on {label}: fits in memory", p.memory_bytes, p.budget_bytes, relation="<=", unit="B")
            r.claim(f"{name} on {label}: t x p x d x c = GPUs", p.tp * p.pp * p.dp * p.cp, c.gpus)
            r.claim(f"{name} on {label}: TP inside one node", p.tp, c.gpus_per_node, relation="<=")
            main = max(p.overheads, key=p.overheads.get)
            rows.append([name, label, p.label(), Quantity(p.memory_bytes, "B"), f"{p.overhead:.1%}",
                         f"{main} {p.overheads[main]:.1%}" if p.overhead else "—"])
            r.data[f"{name} / {label}"] = p.to_dict()
    long = Workload(seq=LONG_SEQ)
    label, c = "8 nodes, 64 H100, NVLink + IB NDR", clusters()["8 nodes, 64 H100, NVLink + IB NDR"]
    p = recommend("70B", c, long)
    r.claim(f"70B at {LONG_SEQ} tokens on {label}: context parallelism is needed", p.cp, 2, relation=">=")
    rows.append([f"70B, {LONG_SEQ:,} tokens", label, p.label(), Quantity(p.memory_bytes, "B"), f"{p.overhead:.1%}",
                 ", ".join(f"{k} {v:.1%}" for k, v in p.overheads.items() if v)])
    r.add("long_seq", LONG_SEQ, "tokens", "long-context example")
    r.add("long_cp", p.cp, "", "context-parallel size chosen at that length")
    r.table("plans", ["model", "cluster", "plan", "memory per GPU", "overhead (upper bound)", "largest part"], rows,
            caption=f"Global batch {w.global_batch_tokens / 2**20:g}M tokens, micro-batch {w.micro_batch}, each "
                    f"model's training sequence, mixed-precision AdamW, {w.usable_fraction:.0%} of HBM usable.")
    _closed_forms(r)
    return r


def _closed_forms(r: Result) -> None:
    from distlab.collectives import per_direction_bytes_per_s

    flops = value("gpus.H100-SXM.bf16_dense_tflops") * 1e12
    nvlink, ib = per_direction_bytes_per_s("NVLink4-H100"), per_direction_bytes_per_s("InfiniBand-NDR")
    gpt3 = preset("175B")
    c = cluster("8x8", 8)
    w = Workload(recompute="selective")
    kw = dict(pp=1, dp=8, cp=1, ep=1, zero=1, microbatches=64)
    measured = overheads(gpt3, c, w, tp=8, **kw)["tensor"]
    r.claim("175B, t=8 on NVLink: TP overhead = 2(t-1)F/(9hB)", measured,
            tp_overhead_closed_form(8, gpt3.hidden, flops, nvlink), rel_tol=1e-3,
            formula="a GPT layer has 12h^2 + 13h parameters")
    m = preset("70B")
    for t, link, key in ((8, nvlink, "tp8_nvlink"), (16, ib, "tp16_ib"), (2, ib, "tp2_ib")):
        r.add(f"70b_{key}_overhead", tp_overhead_closed_form(t, m.hidden, flops, link), "",
              f"70B: TP all-reduce time over compute, t={t}")
    one = memory_per_gpu(m, w, tp=8, pp=1, dp=8, cp=1, ep=1, zero=1, microbatches=32)["activations"]
    eight = memory_per_gpu(m, w, tp=8, pp=8, dp=1, cp=1, ep=1, zero=1, microbatches=32)["activations"]
    r.claim("70B, t=8: 1F1B's first stage holds as many activations with p=8 as with p=1", eight, one,
            rel_tol=1e-12, unit="B", formula="L/p layers x p micro-batches in flight")
    r.add("70b_stage0_activations", eight, "B", "70B, t=8, selective: activations on pipeline stage 0, p = 8")
    r.add("zero3_hidden_tokens", zero3_hidden_tokens(flops, ib), "tokens",
          "tokens per data-parallel replica per step above which ZeRO-3 traffic hides (H100, IB NDR)")
    a100 = value("gpus.A100-SXM-80GB.bf16_dense_tflops") * 1e12
    r.add("zero3_hidden_tokens_ethernet", zero3_hidden_tokens(a100, per_direction_bytes_per_s("Ethernet-100G")),
          "tokens", "the same for A100 over 100 GbE")
    w = Workload()
    r.add("global_batch_tokens", w.global_batch_tokens, "tokens", "global batch assumed")
    r.add("tokens_per_replica_1024", w.global_batch_tokens // 1024, "tokens",
          "tokens per step each of 1024 data-parallel replicas gets")
