"""What the planner is asked about: a model, a cluster, the training settings, and one candidate plan.

All four are frozen keyword-only dataclasses that validate themselves, so the cost model (distlab.planner.cost)
and the search (distlab.planner.search) never see an inconsistent request. Models come from
distlab.models.shapes (presets or a JSON file), accelerators from distlab.hardware.gpus, links from
distlab/data/interconnect.toml, device capacities and the memory reserve from distlab/data/planner.toml.

Pure Python: the planner runs where numpy and torch do not (the browser, under Pyodide).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from distlab.core.facts import entries, value
from distlab.gpu.block_bytes import FRAMEWORKS
from distlab.hardware.gpus import GPU, gpu
from distlab.hardware.links import Link, link
from distlab.memory.model_states import BYTES_PER_PARAM, DEFAULT_PRECISION
from distlab.models.shapes import ModelShape, from_json, preset
from distlab.planner.moe import MoESpec

PRECISIONS = (*BYTES_PER_PARAM, "bf16", "mixed-bf16-moments", "mixed-bf16-state")
"""Chapter 1's conventions (mixed 16 B/param, Megatron's fp32 main_grad 18, fp32 accumulation 20, fp32 16) and what
fine-tuners run: pure bf16 (8 B: torchtune's default) and bf16 moments with fp32 master and main grads (14 B:
Megatron-Core's precision-aware optimizer), and an optimizer state wholly in bf16 beside bf16 weights and gradients
(10 B: Apex's DistributedFusedAdam at dtype bf16, NeMo's Nemotron-4 340B recipe);
distlab.planner.memory.state_bytes_per_param prices each."""
MATMUL_DTYPES = ("bf16", "fp8")  # what the weight matmuls run in (fp8: Transformer Engine's recipe, bf16 elsewhere)
OPTIMIZERS = ("adamw", "sgd", "adamw-8bit", "adamw-8bit-paged", "adamw-in-backward")
"""sgd: with momentum, one moment instead of Adam's two; adamw-8bit: bitsandbytes' block-wise 8-bit moments (paged:
the same bytes, spilling to the host under pressure); adamw-in-backward: each gradient applied and freed in backward
(torchtune's optimizer_in_bwd; no gradient accumulation)."""
PEFT = ("none", "lora", "qlora")
"""none: every weight trains; lora: a frozen bf16 base with rank-r adapters; qlora: the base in NF4 with double
quantization (Dettmers et al. 2023)."""
PEFT_CODES = ("generic", "litgpt")
"""Whose adapter code a PEFT run executes: generic (adapters on every linear layer, activations as full training
saves them, the output head unquantized) or litgpt (Lit-GPT 8641822's LoRA on q and v with dropout 0.05 and
bitsandbytes' Linear4bit for every nn.Linear, lm_head included: its saved tensors counted op by op)."""
TASKS = ("pretrain", "finetune")
ATTENTION = ("flash", "standard")  # standard: the s x s scores go through HBM (Megatron-LM 2021)
RECOMPUTE = ("none", "selective", "full")
RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe_act", "moe", "op")
LOSSES = ("stack", "eager", "hf", "fused", "chunked")
"""The cross-entropy's implementation: the stack's own (stack), PyTorch's on upcast logits (eager), a Hugging
Face-style loss that also keeps the bf16 logits and their upcast (hf), Megatron's vocab-parallel one (fused), or
torchtune's chunked one (chunked: one chunk upcast at a time); memory_buffers.toml prices each."""
"""Megatron-Core's --recompute-modules (with --recompute-granularity selective): the attention core (the default), the
dense MLP, the norms' outputs, the MoE experts' activation function, the whole MoE layer; and op, torchtitan's per-op
policy (alone: the outputs of attention and of every other matmul are saved, everything else recomputed)."""
OFFLOAD = ("none", "optimizer", "params")  # ZeRO-Offload (stage >= 1); ZeRO-Infinity's parameters too (stage 3)
SCHEDULES = ("1f1b", "interleaved", "zb-h1")
KERNELS = tuple(FRAMEWORKS)  # the training code's kernels (distlab.gpu.block_bytes): megatron's fused, eager, ...
STACKS = ("any", "megatron-core", "torchtitan", "deepspeed", "fsdp2")
"""The training stacks a plan can be restricted to (what schedules, features and buffers each ships); any = no
restriction, every technique the cost model knows."""


def model(spec: str | ModelShape) -> ModelShape:
    """A preset name ("7B") or a path to a JSON file with layers, hidden, heads, kv_heads, ffn, vocab, seq."""
    if isinstance(spec, ModelShape):
        return spec
    if spec.endswith(".json"):
        return from_json(spec)
    return preset(spec)


# ---------------------------------------------------------------- how much of a GPU a plan may fill
@functools.cache
def device_capacity_bytes(chip: GPU) -> float:
    """What the driver reports as the device's memory (nvidia-smi's total, in MiB), which is more than the
    datasheet's round figure (an "80 GB" H100 reports 81,559 MiB = 85.5e9 bytes); the datasheet's bytes where
    no report is on file."""
    row = entries("planner").get(f"capacity-{chip.name}")
    return row["reported_mib"] * 2**20 if row else chip.hbm_bytes


FRAGMENTATION_FRACTION = 0.05
"""An assumption, not a measurement: the share of the device the caching allocator holds reserved but cannot
hand out on a long run (no published figure; PYTORCH_CUDA_ALLOC_CONF=expandable_segments reduces it)."""


def reserve_bytes(chip: GPU) -> float:
    """What a training process cannot give to tensors, whatever the plan: the CUDA context the first CUDA call
    creates (distlab/data/planner.toml) and the allocator's fragmentation (FRAGMENTATION_FRACTION). NCCL's
    buffers depend on the plan's communicators: distlab.planner.cost counts them with its memory."""
    context = value("planner.memory-reserve.cuda_context_mib") * 2**20
    return context + FRAGMENTATION_FRACTION * device_capacity_bytes(chip)


@functools.cache
def usable_bytes(chip: GPU) -> float:
    """Bytes a plan's model state, activations and buffers may fill on one GPU."""
    return device_capacity_bytes(chip) - reserve_bytes(chip)


# ---------------------------------------------------------------- the cluster
@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Identical nodes of identical GPUs; inside a node an NVLink-class link, between nodes NICs (one per GPU on a
    DGX, rail-optimised: GPU i of every node on the same leaf switch)."""

    gpu: GPU
    """The accelerator (distlab.hardware.gpus.gpu)."""
    gpus_per_node: int
    nodes: int
    intra: Link
    """Per GPU, per direction, inside a node."""
    inter: Link
    """One NIC, per direction, between nodes."""
    nics_per_node: int
    """NICs a node's GPUs share (a DGX H100 has 8); the node's egress is this many times the NIC."""
    pcie: Link
    """GPU to host, for CPU offload."""
    host_bytes_per_s: float
    """Host DRAM bandwidth of one node (CPU offload's update runs there)."""
    host_bytes: float
    """Host memory of one node (what CPU offload may fill)."""
    nvlink_domain: int = 0
    """GPUs that reach each other over NVLink: the node (0, the default: an HGX/DGX), or a rack of several hosts
    behind NVLink switches (GB200 NVL72: 72 GPUs in trays of 4). A multiple of gpus_per_node that divides the GPUs."""
    oversubscription: float = 1.0
    """The fabric's oversubscription between NVLink domains (1: full bisection bandwidth, a rail-optimised fat tree;
    2: a 2:1 tapered tier): traffic that leaves the domain gets the NICs' bandwidth divided by this factor, the
    worst case in which every flow crosses the tapered tier."""
    rank_jitter: float = 0.0
    """One rank's step-time standard deviation over its mean: the slowest of N ranks sets the step
    (distlab.planner.scale_costs). 0 (the default): no stragglers, because chapter 10's stated 2 % (RANK_JITTER),
    switched on for every run, makes the published-runs validation worse (chapter 13, experiment scale-costs)."""

    def __post_init__(self) -> None:
        for name in ("gpus_per_node", "nodes", "nics_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"cluster: {name} must be a positive integer, got {v!r}")
        if not (self.host_bytes_per_s > 0 and self.host_bytes > 0):
            raise ValueError("cluster: host memory and its bandwidth must be positive")
        d = self.nvlink_domain
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"cluster: the NVLink domain must be a positive number of GPUs, got {d!r}")
        if d and d % self.gpus_per_node:
            raise ValueError(
                f"cluster: an NVLink domain of {d} GPUs is not a whole number of {self.gpus_per_node}-GPU nodes"
            )
        if d and self.gpus % d:
            raise ValueError(f"cluster: an NVLink domain of {d} GPUs does not divide the {self.gpus} GPUs")
        if not (math.isfinite(self.oversubscription) and 1 <= self.oversubscription <= 64):
            raise ValueError(f"cluster: oversubscription must be between 1 and 64, got {self.oversubscription!r}")
        if not (math.isfinite(self.rank_jitter) and 0 <= self.rank_jitter <= 0.5):
            raise ValueError(f"cluster: rank jitter must be between 0 and 0.5, got {self.rank_jitter!r}")

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def domain(self) -> int:
        """GPUs of one NVLink domain: what TP, EP and CP may span without touching the network."""
        return self.nvlink_domain or self.gpus_per_node

    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        """A node's network egress divided among its GPUs (and by the fabric's oversubscription): what each GPU's
        traffic between NVLink domains can use."""
        return self.nics_per_node * self.inter.bandwidth_bytes_per_s / self.gpus_per_node / self.oversubscription

    def describe(self) -> str:
        nics = (
            "one NIC per GPU"
            if self.nics_per_node == self.gpus_per_node
            else f"{self.nics_per_node} NIC{'s' if self.nics_per_node > 1 else ''} per node"
        )
        where = "in a node" if self.domain == self.gpus_per_node else f"in a {self.domain}-GPU NVLink domain"
        taper = f", fabric {self.oversubscription:g}:1 oversubscribed" if self.oversubscription > 1 else ""
        return (
            f"{self.nodes} x {self.gpus_per_node} {self.gpu.name} ({self.intra.bandwidth_bytes_per_s / 1e9:g} "
            f"GB/s {where} per GPU and direction; {nics} of {self.inter.bandwidth_bytes_per_s / 1e9:g} GB/s{taper})"
        )


def _link(spec: str | float, fallback_transport: str, name: str) -> Link:
    """A link from interconnect.toml by name, or a bandwidth in GB/s per direction (latency: NCCL's
    per-step latency of `fallback_transport`, Simple protocol)."""
    if isinstance(spec, str):
        try:
            gbytes_per_s = float(spec)
        except ValueError:
            return link(spec, protocol="simple")
    else:
        gbytes_per_s = spec
    if not math.isfinite(gbytes_per_s) or not gbytes_per_s > 0:
        raise ValueError(f"{name} bandwidth must be positive (a finite number of GB/s), got {gbytes_per_s}")
    if gbytes_per_s > 1e6:
        raise ValueError(f"{name} bandwidth must be at most 1e6 GB/s (a petabyte per second), got {gbytes_per_s:g}")
    alpha = value(f"interconnect.nccl-latency-{fallback_transport}.ring_simple_us") * 1e-6
    return Link(
        name=f"{gbytes_per_s:g} GB/s",
        bandwidth_bytes_per_s=gbytes_per_s * 1e9,
        alpha_s=alpha,
        transport=fallback_transport,
    )


def cluster(
    gpu_name: str = "H100-SXM",
    *,
    gpus_per_node: int = 8,
    nodes: int = 1,
    intra: str | float | None = None,
    inter: str | float = "InfiniBand-NDR",
    nics_per_node: int | None = None,
    pcie: str | None = None,
    host: str = "DGX-H100-host",
    nvlink_domain: int | None = None,
    oversubscription: float = 1.0,
    rank_jitter: float = 0.0,
) -> Cluster:
    """A cluster from the data files. intra defaults to the GPU's own GPU-to-GPU link (gpus.toml), one NIC per GPU
    (a DGX), pcie to PCIe 4 for A100s and PCIe 5 otherwise; host memory bandwidth from host_links.toml."""
    from distlab.sharding.offload import node_memory_bytes_per_s

    chip = gpu(gpu_name)
    if intra is None:
        intra_link = link(value(f"gpus.{chip.name}.link"), protocol="simple")
    else:
        intra_link = _link(intra, "nvlink", "intra-node")
    pcie = pcie or ("PCIe4-x16" if chip.name.startswith("A100") else "PCIe5-x16")
    return Cluster(
        gpu=chip,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        intra=intra_link,
        inter=_link(inter, "net", "inter-node"),
        nics_per_node=gpus_per_node if nics_per_node is None else nics_per_node,
        pcie=link(pcie, protocol="simple"),
        host_bytes_per_s=node_memory_bytes_per_s(host),
        host_bytes=value(f"host_links.{host}.host_memory_tb") * 1e12,
        nvlink_domain=0 if nvlink_domain in (None, gpus_per_node) else nvlink_domain,
        oversubscription=oversubscription,
        rank_jitter=rank_jitter,
    )


# ---------------------------------------------------------------- the training settings
@dataclass(frozen=True, kw_only=True)
class Training:
    """How the model is trained: the global batch and the switches every plan shares."""

    global_batch_tokens: int
    """Tokens per optimizer step, all GPUs together (a multiple of seq)."""
    seq: int
    """Sequence length s."""
    precision: str = DEFAULT_PRECISION
    """Bytes per parameter of model state (distlab.memory.model_states.BYTES_PER_PARAM): mixed = bf16 weights and
    gradients, fp32 master weights and moments (16 B); mixed-fp32-grads = Megatron's fp32 main_grad (18 B);
    mixed-fp32-accum (20 B); fp32 (16 B, and fp32 compute)."""
    matmul_dtype: str = "bf16"
    """What the weight matmuls run in: bf16, or fp8 (Transformer Engine: fp8 GEMMs, bf16 everything else)."""
    optimizer: str = "adamw"
    task: str = "pretrain"
    """pretrain or finetune (a full fine-tune: every weight trains, so the cost model is the same)."""
    attention: str = "flash"
    dropout: bool = False
    """Dropout masks and their kernels (GPT-3-era pretraining used them; Llama does not)."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism with TP (splits norms, dropout and residuals t ways)."""
    tp_overlap: bool = False
    """Tensor-parallel collectives overlapped with the matmuls next to them (Megatron-Core's --tp-comm-overlap,
    Transformer Engine's userbuffers, PyTorch's async-TP); off, they sit on the critical path. Off by default: every
    stack makes it opt-in (distlab/data/stacks.toml), and PyTorch's async-TP needs torch.compile."""
    moe: MoESpec | None = None
    """The experts of a mixture-of-experts model (distlab.planner.moe.MoESpec), None for a dense one."""
    kernels: str = "megatron"
    """The training code's memory-bound kernels (distlab.gpu.block_bytes.FRAMEWORKS): megatron (Megatron-LM's fused
    LayerNorm, bias-GeLU, bias-dropout-add and softmax; Transformer Engine), llm-foundry or torchtitan (eager
    PyTorch, op by op), torchtitan-compile (fused blocks, eager loss)."""
    grad_reduce_overlap: bool = True
    """Whether the data-parallel gradient reduction overlaps the last backward (PyTorch DDP's buckets, Megatron-Core's
    --overlap-grad-reduce, FSDP) or waits for it (Megatron-LM 2021's local DDP, DeepSpeed's pipeline engine)."""
    framework: str = "any"
    """The training stack (STACKS) whose schedules, features and own buffers a plan must use; any: no restriction."""
    peft: str = "none"
    """Parameter-efficient fine-tuning (PEFT): none, lora (frozen bf16 base) or qlora (frozen NF4 base)."""
    lora_rank: int = 16
    """The adapters' rank r (LoRA on every linear layer of attention and MLP)."""
    rmsnorm_upcast: bool = False
    """The RMSNorms cast to fp32 and run eagerly, outside torch.compile (torchtune's RMSNorm without compile=True):
    autograd keeps the fp32 copy and the normalised bf16 tensor, not the bf16 input chapter 3 counts."""
    peft_code: str = "generic"
    """Whose adapter code runs (PEFT_CODES): what it saves for backward and which weights it quantizes."""
    activation_offload: bool = False
    """Saved activations go to host memory after each layer's forward and come back for its backward (torchtune's
    enable_activation_offloading, Megatron-Core's CPU offloading): the GPU keeps two layers' worth, the host the rest,
    and the PCIe link carries them (distlab.planner.cost.activation_offload_seconds)."""
    recompute_modules: tuple[str, ...] = ("core_attn",)
    """What selective recomputation reruns in backward (RECOMPUTE_MODULES; Megatron-Core's default: core_attn)."""
    loss: str = "stack"
    """The cross-entropy's implementation (LOSSES): what it keeps of the logits through backward."""
    reshard_after_forward: bool = True
    """ZeRO-3 / FSDP2: free each layer's gathered weights after its forward (True, the default) or keep them until
    its backward (False: no second all-gather, the whole unsharded model on the GPU)."""

    def __post_init__(self) -> None:
        for name, allowed in (
            ("kernels", KERNELS),
            ("precision", PRECISIONS),
            ("matmul_dtype", MATMUL_DTYPES),
            ("optimizer", OPTIMIZERS),
            ("task", TASKS),
            ("attention", ATTENTION),
            ("framework", STACKS),
            ("peft", PEFT),
            ("peft_code", PEFT_CODES),
            ("loss", LOSSES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        bad = [x for x in self.recompute_modules if x not in RECOMPUTE_MODULES]
        if "op" in self.recompute_modules and len(self.recompute_modules) > 1:
            raise ValueError("recompute module op (torchtitan's per-op policy) is a whole policy: use it alone")
        if bad or not self.recompute_modules:
            raise ValueError(
                f"recompute modules must be a non-empty list of {', '.join(RECOMPUTE_MODULES)}, not {bad or '()'}"
            )
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 1:
            raise ValueError(f"lora_rank must be a positive integer, got {self.lora_rank!r}")
        if self.seq < 1 or self.global_batch_tokens < 1:
            raise ValueError("sequence length and global batch must be positive")
        if self.global_batch_tokens % self.seq:
            raise ValueError(
                f"global batch of {self.global_batch_tokens:,} tokens is not a whole number of "
                f"{self.seq:,}-token sequences"
            )
        if self.peft != "none" and self.optimizer == "adamw-in-backward":
            raise ValueError("adamw-in-backward is for full fine-tunes: with PEFT only the adapters have gradients")
        if self.matmul_dtype == "fp8" and self.precision == "fp32":
            raise ValueError("fp8 matmuls need mixed precision (fp32 training runs its matmuls in tf32)")

    @property
    def sequences(self) -> int:
        return self.global_batch_tokens // self.seq

    @property
    def compute_dtype(self) -> str:
        """The dtype of the peak the matmuls run against."""
        return "tf32" if self.precision == "fp32" else self.matmul_dtype


# ---------------------------------------------------------------- one plan
@dataclass(frozen=True, kw_only=True)
class Plan:
    """One way to run the step: the parallel sizes, the ZeRO stage, the micro-batch, the pipeline schedule and
    what is traded for memory. tp x cp x pp x dp = GPUs; ep splits the experts of an MoE model over ep of the
    dp x cp ranks; microbatches = sequences per step / (dp x micro_batch)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    micro_batch: int = 1
    microbatches: int = 1
    """Micro-batches per optimizer step per pipeline: gradient accumulation steps."""
    recompute: str = "none"
    offload: str = "none"
    schedule: str = "1f1b"
    virtual: int = 1
    """Model chunks per pipeline stage (the interleaved schedule; 1 otherwise)."""
    dp_replicate: int = 1
    """Hybrid sharding (HSDP, FSDP2's 2-D mesh): the dp ranks form dp_replicate replicas of dp_shard = dp /
    dp_replicate ranks each; ZeRO shards inside a replica, gradients are all-reduced across replicas. 1: the
    whole data-parallel group shards (plain ZeRO/FSDP)."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "microbatches", "virtual", "dp_replicate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"plan: {name} must be a positive integer, got {v!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"plan: zero must be 0, 1, 2 or 3, not {self.zero!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"plan: recompute must be one of {', '.join(RECOMPUTE)}, not {self.recompute!r}")
        if self.offload not in OFFLOAD:
            raise ValueError(f"plan: offload must be one of {', '.join(OFFLOAD)}, not {self.offload!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"plan: schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}")
        if self.offload != "none" and self.zero < (3 if self.offload == "params" else 1):
            need = "ZeRO-3 (only it shards the parameters)" if self.offload == "params" else "ZeRO-1 or higher"
            raise ValueError(f"plan: offloading the {self.offload} needs {need}, not ZeRO-{self.zero}")
        if self.offload == "params" and self.pp > 1:
            raise ValueError(
                "plan: offloading the params needs no pipeline (with one, ZeRO-3 keeps each stage's weights)"
            )
        if self.schedule == "interleaved":
            if self.pp == 1 or self.virtual < 2:
                raise ValueError("plan: the interleaved schedule needs pp > 1 and virtual >= 2 chunks per stage")
            if self.microbatches % self.pp:
                raise ValueError(
                    f"plan: the interleaved schedule needs micro-batches divisible by pp "
                    f"({self.microbatches} % {self.pp} = {self.microbatches % self.pp})"
                )
        elif self.virtual != 1:
            raise ValueError(f"plan: virtual chunks apply only to the interleaved schedule, not {self.schedule}")
        if self.pp == 1 and self.schedule != "1f1b":
            raise ValueError(f"plan: the {self.schedule} schedule needs pipeline stages (pp > 1)")
        if (self.dp * self.cp) % self.ep:
            raise ValueError(f"plan: ep {self.ep} must divide the data x context-parallel ranks {self.dp * self.cp}")
        if self.dp % self.dp_replicate:
            raise ValueError(f"plan: dp-replicate {self.dp_replicate} does not divide DP {self.dp}")
        if self.dp_replicate > 1 and self.zero == 0:
            raise ValueError("plan: hybrid sharding (dp-replicate > 1) shards inside each replica: it needs ZeRO >= 1")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def dp_shard(self) -> int:
        """Data-parallel ranks of one replica: what ZeRO shards over (all of dp without hybrid sharding)."""
        return self.dp // self.dp_replicate

    @property
    def shard_group(self) -> int:
        """Ranks the model state is sharded over: a replica's data-parallel ranks times CP (CP ranks shard too)."""
        return self.dp_shard * self.cp

    def label(self) -> str:
        hsdp = f" (shard {self.dp_shard} x replicate {self.dp_replicate})" if self.dp_replicate > 1 else ""
        dp = f"DP {self.dp}{hsdp}"
        parts = [f"TP {self.tp}", f"PP {self.pp}", dp]
        parts += [f"CP {self.cp}"] if self.cp > 1 else []
        parts += [f"EP {self.ep}"] if self.ep > 1 else []
        zero = "DDP" if self.zero == 0 else f"ZeRO-{self.zero}"
        extra = [f"{self.recompute} recompute"] if self.recompute != "none" else []
        if self.offload != "none":
            extra.append("offload optimizer" if self.offload == "optimizer" else "offload optimizer and params")
        if self.pp > 1 and self.schedule != "1f1b":
            extra.append(f"{self.schedule}" + (f" v={self.virtual}" if self.schedule == "interleaved" else ""))
        return (
            " x ".join(parts)
            + f", {zero}, micro-batch {self.micro_batch} x {self.microbatches}"
            + "".join(f", {e}" for e in extra)
        )
