"""What the planner is asked about: a model, a cluster, the training settings, and one candidate plan.

All four are frozen keyword-only dataclasses that validate themselves, so the cost model (plan_cost.py) and
the search (planner.py) never see an inconsistent request. Models come from distlab.models.shapes (presets
or a JSON file), accelerators from distlab.hardware.gpus, links from distlab/data/interconnect.toml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distlab.core.facts import value
from distlab.hardware.gpus import GPU, gpu
from distlab.hardware.links import Link, link
from distlab.models.shapes import ModelShape, from_json, preset

PRECISIONS = ("mixed", "fp32")  # chapter 1's two conventions (bf16 compute with fp32 master weights, or fp32)
OPTIMIZERS = ("adamw", "sgd")  # sgd: with momentum, one fp32 moment instead of Adam's two
TASKS = ("pretrain", "finetune")
ATTENTION = ("flash", "standard")  # standard: the s x s scores go through HBM (Megatron-LM 2021)
RECOMPUTE = ("none", "selective", "full")
OFFLOAD = ("none", "optimizer", "optimizer+params")  # ZeRO-Offload (stage >= 1) and ZeRO-Infinity (stage 3)
USABLE_FRACTION = 0.9  # share of HBM a plan may fill: CUDA context, NCCL buffers, allocator fragmentation


def model(spec: str | ModelShape) -> ModelShape:
    """A preset name ("7B") or a path to a JSON file with layers, hidden, heads, kv_heads, ffn, vocab, seq."""
    if isinstance(spec, ModelShape):
        return spec
    if spec.endswith(".json"):
        return from_json(spec)
    return preset(spec)


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Identical nodes of identical GPUs; inside a node an NVLink-class link, between nodes a network link
    per GPU (one NIC per GPU, rail-optimised, as DGX nodes are built)."""

    gpu: GPU
    """The accelerator (distlab.hardware.gpus.gpu)."""
    gpus_per_node: int
    nodes: int
    intra: Link
    """Per GPU, per direction, inside a node."""
    inter: Link
    """Per GPU, per direction, between nodes."""
    pcie: Link
    """GPU to host, for CPU offload."""
    host_bytes_per_s: float
    """Host DRAM bandwidth of one node (CPU offload's update runs there)."""
    host_bytes: float
    """Host memory of one node (what CPU offload may fill)."""

    def __post_init__(self) -> None:
        for name in ("gpus_per_node", "nodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"cluster: {name} must be a positive integer, got {v!r}")
        if not (self.host_bytes_per_s > 0 and self.host_bytes > 0):
            raise ValueError("cluster: host memory and its bandwidth must be positive")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def describe(self) -> str:
        return (
            f"{self.nodes} x {self.gpus_per_node} {self.gpu.name} ({self.intra.bandwidth_bytes_per_s / 1e9:g} "
            f"GB/s in a node, {self.inter.bandwidth_bytes_per_s / 1e9:g} GB/s between nodes, per GPU and "
            "direction)"
        )


def _link(spec: str | float, fallback_transport: str, name: str) -> Link:
    """A link from interconnect.toml by name, or a bandwidth in GB/s per direction (latency: NCCL's
    per-step latency of `fallback_transport`, Simple protocol: planning is about large messages)."""
    if isinstance(spec, str):
        try:
            spec = float(spec)
        except ValueError:
            return link(spec, protocol="simple")
    if not math.isfinite(spec) or not spec > 0:
        raise ValueError(f"{name} bandwidth must be positive (a finite number of GB/s), got {spec}")
    if spec > 1e6:
        raise ValueError(f"{name} bandwidth must be at most 1e6 GB/s (a petabyte per second), got {spec:g}")
    alpha = value(f"interconnect.nccl-latency-{fallback_transport}.ring_simple_us") * 1e-6
    return Link(name=f"{spec:g} GB/s", bandwidth_bytes_per_s=spec * 1e9, alpha_s=alpha, transport=fallback_transport)


def cluster(
    gpu_name: str = "H100-SXM",
    *,
    gpus_per_node: int = 8,
    nodes: int = 1,
    intra: str | float | None = None,
    inter: str | float = "InfiniBand-NDR",
    pcie: str | None = None,
    host: str = "DGX-H100-host",
) -> Cluster:
    """A cluster from the data files. intra defaults to the GPU's own GPU-to-GPU links (gpus.toml), pcie to
    PCIe 4 for A100s and PCIe 5 otherwise; host memory bandwidth from host_links.toml (distlab.sharding.offload)."""
    from distlab.sharding.offload import node_memory_bytes_per_s

    chip = gpu(gpu_name)
    if intra is None:
        alpha = value("interconnect.nccl-latency-nvlink.ring_simple_us") * 1e-6
        intra_link = Link(
            name=f"{chip.link_name}", bandwidth_bytes_per_s=chip.link_bytes_per_s, alpha_s=alpha, transport="nvlink"
        )
    else:
        intra_link = _link(intra, "nvlink", "intra-node")
    pcie = pcie or ("PCIe4-x16" if chip.name.startswith("A100") else "PCIe5-x16")
    return Cluster(
        gpu=chip,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        intra=intra_link,
        inter=_link(inter, "net", "inter-node"),
        pcie=link(pcie, protocol="simple"),
        host_bytes_per_s=node_memory_bytes_per_s(host),
        host_bytes=value(f"host_links.{host}.host_memory_tb") * 1e12,
    )


@dataclass(frozen=True, kw_only=True)
class Training:
    """How the model is trained: the global batch and what each step keeps."""

    global_batch_tokens: int
    """Tokens per optimizer step, all GPUs together (a multiple of seq)."""
    seq: int
    """Sequence length s."""
    precision: str = "mixed"
    """mixed: bf16 compute, fp32 master weights and moments (2 + 2 + 12 bytes/param); fp32: 4 + 4 + 8."""
    optimizer: str = "adamw"
    task: str = "pretrain"
    """pretrain or finetune (a full fine-tune: every weight trains, so the cost model is the same)."""
    attention: str = "flash"
    usable_fraction: float = USABLE_FRACTION
    dropout: bool = False
    """Dropout masks and their kernels (GPT-3-era pretraining used them; Llama does not)."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism with TP (splits norms, dropout and residuals t ways)."""

    def __post_init__(self) -> None:
        for name, allowed in (
            ("precision", PRECISIONS),
            ("optimizer", OPTIMIZERS),
            ("task", TASKS),
            ("attention", ATTENTION),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if self.seq < 1 or self.global_batch_tokens < 1:
            raise ValueError("sequence length and global batch must be positive")
        if self.global_batch_tokens % self.seq:
            raise ValueError(
                f"global batch of {self.global_batch_tokens:,} tokens is not a whole number of "
                f"{self.seq:,}-token sequences"
            )
        if not 0 < self.usable_fraction <= 1:
            raise ValueError(f"usable fraction of HBM must be in (0, 1], got {self.usable_fraction}")

    @property
    def sequences(self) -> int:
        return self.global_batch_tokens // self.seq


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One way to run the step: the parallel sizes, the ZeRO stage, the micro-batch and what is traded for
    memory. tp x cp x pp x dp = GPUs; microbatches = sequences per step / (dp x micro_batch)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    zero: int = 0
    micro_batch: int = 1
    microbatches: int = 1
    """Micro-batches per optimizer step per pipeline: gradient accumulation steps."""
    recompute: str = "none"
    offload: str = "none"

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "micro_batch", "microbatches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"plan: {name} must be a positive integer, got {v!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"plan: zero must be 0, 1, 2 or 3, not {self.zero!r}")
        if self.recompute not in RECOMPUTE or self.offload not in OFFLOAD:
            raise ValueError(f"plan: recompute in {RECOMPUTE}, offload in {OFFLOAD}")
        if self.offload != "none" and self.zero < (3 if self.offload == "optimizer+params" else 1):
            raise ValueError(f"plan: offloading the {self.offload} needs a higher ZeRO stage than {self.zero}")
        if self.pp > 1 and self.zero > 1:
            raise ValueError("plan: ZeRO-2/3 shard what pipeline stages need each micro-batch; use ZeRO-0/1 with PP")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def label(self) -> str:
        parts = [f"TP {self.tp}", f"PP {self.pp}", f"DP {self.dp}"] + ([f"CP {self.cp}"] if self.cp > 1 else [])
        zero = "DDP" if self.zero == 0 else f"ZeRO-{self.zero}"
        extra = ([f"{self.recompute} recompute"] if self.recompute != "none" else []) + (
            [f"offload {self.offload}"] if self.offload != "none" else []
        )
        return (
            " x ".join(parts)
            + f", {zero}, micro-batch {self.micro_batch} x {self.microbatches}"
            + "".join(f", {e}" for e in extra)
        )
