"""The corpus of published training runs (distlab/data/published_runs.toml), loaded strictly, and each run as
the planner sees it: the model, the cluster, the training set-up and the layout the source prints.

A row must name a source the file defines and carry the model shape, the hardware, the layout, the batch and a
throughput; anything else the source does not print is in its `unknown` list, never guessed here. What the
planner does with an unknown field is stated once, in `request`: a layout dimension it does not know (the
micro-batch, the ZeRO stage, the recomputation, the interleaving) it searches, as it would for any plan; a
switch (sequence parallelism, TP overlap) takes the framework's documented default.

Published throughput is compared as tokens per second per GPU: the sources count FLOPs differently (Narayanan
et al. count the recomputed forward, Megatron-Core and LLM Foundry do not), tokens are tokens. Where a source
prints only TFLOP/s, its own FLOP formula (the row's flop_convention) turns them into tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from distlab.core.facts import dataset, entries

REQUIRED = (
    "source",
    "detail",
    "model",
    "layers",
    "hidden",
    "heads",
    "ffn",
    "mlp",
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dp",
    "cp",
    "global_batch",
    "seq",
    "flop_convention",
    "kernels",
)
THROUGHPUT = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")
CONVENTIONS = (
    "megatron-96Bslh2",
    "megatron-core-r0.8",
    "mpt-6N+12lds",
    "nemo-model (formula not printed)",
    "megatron-bridge-model",
    "none (only tokens/s printed)",
)
SHARDING_ZERO = {"none": 0, "zero1": 1, "zero2": 2, "fsdp": 3}
GRAD_REDUCE = ("overlapped", "after-backward")


class CorpusError(ValueError):
    """A row that breaks the corpus schema: the message names the row and what is missing."""


@dataclass(frozen=True)
class Run:
    """One published run: its row of published_runs.toml, checked."""

    key: str
    row: dict

    def get(self, field: str, default=None):
        return self.row.get(field, default)

    @property
    def publisher(self) -> str:
        """The source family (several documents of one publisher count once: notes/corpus.md)."""
        s = self.row["source"]
        return {
            "narayanan2021": "Narayanan et al. 2021",
            "megatron-core-readme": "Megatron-Core (NVIDIA)",
            "llm-foundry-benchmarks": "LLM Foundry (MosaicML)",
            "bigscience-tr11": "BLOOM (BigScience)",
            "nemo-perf-2407": "NeMo (NVIDIA)",
            "megatron-bridge-perf": "Megatron-Bridge (NVIDIA)",
        }.get(s, "torchtitan (PyTorch)" if s.startswith("torchtitan") else s)

    @property
    def family(self) -> str:
        """The layout family: data-parallel only (FSDP/ZeRO), TP without pipelines, or pipelined."""
        if self.row["pp"] > 1:
            return "TP x PP x DP" if self.row["tp"] > 1 else "PP x DP"
        if self.row["tp"] > 1:
            return "TP x DP"
        return "DP only (FSDP/ZeRO/DDP)"


def check_row(key: str, row: dict, sources: dict) -> None:
    """Raise CorpusError unless the row has everything a prediction and a citation need."""
    missing = [f for f in REQUIRED if f not in row and f not in row.get("unknown", [])]
    if "source" not in row:
        raise CorpusError(f"published_runs.toml [{key}]: no source (every row must name the document it is from)")
    if row["source"] not in sources:
        raise CorpusError(f"published_runs.toml [{key}]: source {row['source']!r} is not defined under [sources]")
    for field, src in row.get("sources", {}).items():
        if src not in sources:
            raise CorpusError(f"published_runs.toml [{key}]: the source of {field}, {src!r}, is not defined")
    if missing:
        raise CorpusError(f"published_runs.toml [{key}]: missing {', '.join(missing)} (and not listed as unknown)")
    if not any(f in row for f in THROUGHPUT):
        raise CorpusError(f"published_runs.toml [{key}]: no published throughput ({', '.join(THROUGHPUT)})")
    if row["flop_convention"] not in CONVENTIONS:
        raise CorpusError(f"published_runs.toml [{key}]: unknown flop_convention {row['flop_convention']!r}")
    if row["tp"] * row["pp"] * row["dp"] * row["cp"] != row["gpus"]:
        raise CorpusError(f"published_runs.toml [{key}]: tp x pp x dp x cp != gpus")
    from distlab.gpu.block_bytes import FRAMEWORKS

    if row["kernels"] not in FRAMEWORKS:
        raise CorpusError(f"published_runs.toml [{key}]: unknown kernels {row['kernels']!r} ({', '.join(FRAMEWORKS)})")
    if row.get("grad_reduce", "overlapped") not in GRAD_REDUCE:
        raise CorpusError(f"published_runs.toml [{key}]: grad_reduce must be one of {', '.join(GRAD_REDUCE)}")


def load(data: dict | None = None) -> dict[str, Run]:
    """Every run of the corpus, checked (data: a parsed file, for tests; the data file by default)."""
    data = dataset("published_runs") if data is None else data
    sources = data.get("sources", {})
    out = {}
    for key, row in data.items():
        if key in ("units", "sources"):
            continue
        check_row(key, row, sources)
        out[key] = Run(key, row)
    return out


@functools.cache
def runs() -> dict[str, Run]:
    return load()


# ---------------------------------------------------------------- published throughput, in tokens
def published_tokens_per_s_per_gpu(run: Run) -> float:
    """Tokens per second per GPU as published: printed, or from the printed TFLOP/s by the row's own FLOP count."""
    r = run.row
    if "tokens_per_s_per_gpu" in r:
        return r["tokens_per_s_per_gpu"]
    conv = r["flop_convention"]
    s, l, h, v = r["seq"], r["layers"], r["hidden"], r["vocab"]  # noqa: E741 - the papers' symbols
    if conv == "megatron-96Bslh2":  # FLOPs per token: 96 l h^2 (1 + s/6h + V/16lh) / 1 (per sequence / s)
        per_token = 96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    elif conv == "megatron-core-r0.8":  # 12 l h^2 ((1 + g/a + s/h) q/h + (f/h) m + V/(2 l h)) per token
        g, a, f = r.get("kv_heads", r["heads"]), r["heads"], r["ffn"]
        gated = 1.5 if r["mlp"] == "swiglu" else 1.0
        per_token = 12 * l * h * h * ((1 + g / a + s / h) + f / h * gated + v / (2 * l * h))
    else:
        raise CorpusError(f"{run.key}: no tokens/s printed and no formula for {conv!r}")
    return r["tflops_per_gpu"] * 1e12 / per_token


def sources_table() -> dict[str, dict]:
    """The corpus's [sources] (title, url, detail)."""
    return dataset("published_runs").get("sources", {})


def entries_count() -> int:
    return len(entries("published_runs"))


# ---------------------------------------------------------------- a run as the planner sees it
DEFAULT_NIC_GBITS = {"A100-SXM-80GB": 200, "H100-SXM": 400, "H200": 400}  # DGX A100 (HDR) and DGX H100 (NDR) ports


@dataclass(frozen=True, kw_only=True)
class Framework:
    """What a source's framework does where its row does not print it."""

    attention: str
    """flash or standard (distlab.planner.config.ATTENTION)."""
    dropout: bool
    tp_overlap: bool


FRAMEWORK = {  # what a source's framework does where the row does not print it (see `request`)
    "Narayanan et al. 2021": Framework(attention="standard", dropout=True, tp_overlap=False),
    "BLOOM (BigScience)": Framework(attention="standard", dropout=False, tp_overlap=False),
    "Megatron-Core (NVIDIA)": Framework(attention="flash", dropout=False, tp_overlap=True),
    "NeMo (NVIDIA)": Framework(attention="flash", dropout=False, tp_overlap=True),
    "Megatron-Bridge (NVIDIA)": Framework(attention="flash", dropout=False, tp_overlap=True),
    "LLM Foundry (MosaicML)": Framework(attention="flash", dropout=False, tp_overlap=False),
    "torchtitan (PyTorch)": Framework(attention="flash", dropout=False, tp_overlap=False),
}


def request(run: Run):
    """(model, cluster, training, fixed) for the planner: the run's shape, hardware and set-up, and the layout
    dimensions the row prints (TP, PP, DP, CP and whatever else it prints), leaving the planner to choose only
    what the source does not print (distlab.planner.search with fixed=...).

    Where a row is silent: attention, dropout and TP overlap are the framework's (FRAMEWORK: Megatron-LM 2021 and
    Megatron-DeepSpeed ran standard attention, Megatron-Core and NeMo run Transformer Engine's fused attention
    with --tp-comm-overlap as their performance recipes do, LLM Foundry and torchtitan FlashAttention; async TP
    where torchtitan's row says so); sequence parallelism is on with TP (Megatron-Core's recommendation); the
    network is a DGX's (one NIC per GPU at the generation's rate) unless the row prints its own; gradients are
    reduced in fp32 (Megatron's main_grad, FSDP's default reduce dtype) except in LLM Foundry's PURE bf16 mode. The
    kernels the run's code ran and whether it overlaps the gradient reduction are the row's own (cited) fields.
    """
    from distlab.models.shapes import ModelShape
    from distlab.planner.config import Training, cluster

    r = run.row
    fw = FRAMEWORK.get(run.publisher, FRAMEWORK["torchtitan (PyTorch)"])
    notes = r.get("notes", "")
    tied = r["mlp"] == "gelu" and run.publisher != "Megatron-Core (NVIDIA)"
    m = ModelShape(
        name=r["model"],
        layers=r["layers"],
        hidden=r["hidden"],
        heads=r["heads"],
        kv_heads=r.get("kv_heads", r["heads"]),
        ffn=r["ffn"],
        vocab=r.get("vocab", 51200),  # NeMo's GPT-3: the padded GPT-2 vocabulary, not printed
        seq=r["seq"],
        mlp=r["mlp"],
        tie_embeddings=tied,
    )
    per_node = r.get("gpus_per_node", 8)
    nic = r.get("nic_gbits_per_s", DEFAULT_NIC_GBITS.get(r["gpu"], 400))
    if "1600 Gb/s" in notes:  # LLM Foundry's A100 cluster: 1600 Gb/s per node, NIC count not printed
        nic = 1600 / per_node
    nics = r.get("nics_per_node", per_node)
    c = cluster(
        r["gpu"], gpus_per_node=per_node, nodes=max(1, r["gpus"] // per_node), inter=nic / 8, nics_per_node=nics
    )
    dtype = r.get("dtype", "bf16")
    t = Training(
        global_batch_tokens=r["global_batch"] * r["seq"],
        seq=r["seq"],
        precision="mixed" if "mode PURE" in notes else "mixed-fp32-grads",
        matmul_dtype="fp8" if dtype == "fp8" else "bf16",
        attention=fw.attention,
        dropout=fw.dropout,
        sequence_parallel=r.get("sequence_parallel", True),
        tp_overlap=("async TP" in notes or "asyncTP" in run.key or "AsyncTP" in notes) or fw.tp_overlap,
        kernels=r["kernels"],
        grad_reduce_overlap=r.get("grad_reduce", "overlapped") == "overlapped",
        # torchtitan's "selective" is its per-op policy (the notes say so), not Megatron's attention-core recompute
        recompute_modules=("op",) if r.get("recompute") == "selective" and "per-op" in notes else ("core_attn",),
    )
    fixed = {k: r[k] for k in ("tp", "pp", "dp", "cp")}
    for k in ("micro_batch", "recompute"):
        if k in r:
            fixed[k] = r[k]
    if "sharding" in r:  # a printed strategy shards over all of DP (none of the corpus's is hybrid)
        fixed["zero"], fixed["dp_replicate"] = SHARDING_ZERO[r["sharding"]], 1
    virtual = r.get("virtual")
    if r["pp"] > 1:
        if (virtual or 1) > 1:
            fixed["schedule"], fixed["virtual"] = "interleaved", virtual
        elif "Interleaved" in notes:
            fixed["schedule"] = "interleaved"  # chunks per stage not printed: searched
        elif "virtual" not in r.get("unknown", []):
            fixed["schedule"] = "1f1b"
    fixed["offload"] = "none"
    if "gpu_variant" in r and "96 GB" in r["gpu_variant"]:  # torchtitan's Grand Teton H100: 96 GB HBM2e, 2.4 TB/s
        from dataclasses import replace

        c = replace(c, gpu=replace(c.gpu, name="H100-SXM-96GB-500W", hbm_bytes=96e9, hbm_bytes_per_s=2.4e12))
    return m, c, t, fixed
